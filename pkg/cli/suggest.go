// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tidecache/tidecache/pkg/engine"
	"github.com/tidecache/tidecache/pkg/pool"
)

// A volume, pool or node named on the command line that does not exist,
// and a subcommand that does not, get the closest names that do, the way
// cobra suggests commands (issue 25):
//
//	volume msql: volume not found; did you mean "mysql"?
//
// The suggestion is added to the error, which stays wrapped: errors.Is,
// and so the exit status, see it as before.

const (
	// suggestDistance is the largest edit distance of a suggestion
	// (cobra's default SuggestionsMinimumDistance), and no more than half
	// the length of what was typed: two edits from "db" is any other
	// three-letter name. A name that starts with what was typed is
	// suggested however far.
	suggestDistance = 2
	// maxSuggestions is the most names suggested.
	maxSuggestions = 3
)

// didYouMean adds to err, which says that typed does not exist, the names
// closest to it; err as it is when none is close, or when typed is one of
// names (then err is about something else).
func didYouMean(err error, typed string, names []string) error {
	near := closest(typed, names)
	if len(near) == 0 {
		return err
	}
	quoted := make([]string, len(near))
	for i, n := range near {
		quoted[i] = strconv.Quote(n)
	}
	alternatives := quoted[len(quoted)-1]
	if len(quoted) > 1 {
		alternatives = strings.Join(quoted[:len(quoted)-1], ", ") + " or " + alternatives
	}
	return fmt.Errorf("%w; did you mean %s?", err, alternatives)
}

// suggestListed is didYouMean with the names list returns; a listing that
// fails adds nothing.
func suggestListed(err error, typed string, list func() ([]string, error)) error {
	names, lerr := list()
	if lerr != nil {
		return err
	}
	return didYouMean(err, typed, names)
}

// unknownVolume adds to err, when it says that the volume name is not on
// this node, the closest volumes that are; any other err is returned as
// it is.
func unknownVolume(ctx context.Context, e volumeLister, name string, err error) error {
	if !errors.Is(err, pool.ErrVolumeNotFound) {
		return err
	}
	return suggestListed(err, name, func() ([]string, error) { return localVolumeNames(ctx, e) })
}

// unknownPool adds to err, when it says that the pool name is not on this
// node, the closest pools that are; any other err is returned as it is.
func unknownPool(ctx context.Context, e poolLister, name string, err error) error {
	if name == "" || !errors.Is(err, engine.ErrPoolNotFound) {
		return err
	}
	return suggestListed(err, name, func() ([]string, error) { return localPoolNames(ctx, e) })
}

// unknownCommand is the Args of a command group: an argument is a
// subcommand the group does not have, and the closest ones it has are
// suggested, by the rule names follow. (Cobra suggests only at the root,
// and only when the root has no Args; its SuggestionsFor neither orders
// nor bounds what it finds.)
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	return didYouMean(fmt.Errorf("unknown command %q for %q", args[0], c.CommandPath()), args[0], names)
}

// closest returns the names within suggestDistance of typed (and half its
// length), or starting with it, ignoring case: nearest first, then by
// name, at most maxSuggestions. None when typed is one of names.
func closest(typed string, names []string) []string {
	if slices.Contains(names, typed) {
		return nil
	}
	type candidate struct {
		name     string
		distance int
	}
	var found []candidate
	lower := strings.ToLower(typed)
	most := min(suggestDistance, len(typed)/2)
	for _, n := range names {
		d := editDistance(lower, strings.ToLower(n))
		if d <= most || strings.HasPrefix(strings.ToLower(n), lower) {
			found = append(found, candidate{n, d})
		}
	}
	slices.SortFunc(found, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.distance, b.distance), strings.Compare(a.name, b.name))
	})
	found = slices.CompactFunc(found, func(a, b candidate) bool { return a.name == b.name })
	var out []string
	for _, c := range found[:min(len(found), maxSuggestions)] {
		out = append(out, c.name)
	}
	return out
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of two
// adjacent bytes that turn one into the other ("msyql" is one from
// "mysql").
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j].
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
