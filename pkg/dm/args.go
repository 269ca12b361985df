// SPDX-License-Identifier: Apache-2.0

package dm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// argReader walks the whitespace-separated arguments of a target
// parameter or status string, the way the kernel's dm_shift_arg does, and
// turns every failure into a *ParseError naming the argument.
type argReader struct {
	what string // "writecache params", "cache status", ...
	args []string
	pos  int
}

func newArgReader(what, s string) *argReader {
	return &argReader{what: what, args: strings.Fields(s)}
}

func (r *argReader) fail(arg, value string, err error) error {
	return &ParseError{What: r.what, Arg: arg, Value: value, Err: err}
}

// remaining is the number of arguments not yet consumed.
func (r *argReader) remaining() int { return len(r.args) - r.pos }

// next consumes one argument.
func (r *argReader) next(arg string) (string, error) {
	if r.pos >= len(r.args) {
		return "", r.fail(arg, "", errMissing)
	}
	s := r.args[r.pos]
	r.pos++
	return s, nil
}

// uint consumes an unsigned decimal of at most bits bits.
func (r *argReader) uint(arg string, bits int) (uint64, error) {
	s, err := r.next(arg)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return 0, r.fail(arg, s, numErr(err))
	}
	return v, nil
}

// int consumes a signed decimal of at most bits bits.
func (r *argReader) int(arg string, bits int) (int64, error) {
	s, err := r.next(arg)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, r.fail(arg, s, numErr(err))
	}
	return v, nil
}

// count consumes an argument count ("<#feature args>") and checks that
// that many arguments follow.
func (r *argReader) count(arg string) (int, error) {
	s, err := r.next(arg)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return 0, r.fail(arg, s, numErr(err))
	}
	if int(v) > r.remaining() {
		return 0, r.fail(arg, s, fmt.Errorf("only %d argument(s) follow", r.remaining()))
	}
	return int(v), nil
}

// group consumes n arguments (checked by count) and returns them.
func (r *argReader) group(n int) []string {
	g := r.args[r.pos : r.pos+n]
	r.pos += n
	if len(g) == 0 {
		return nil
	}
	return append([]string(nil), g...)
}

// sub consumes n arguments and returns a reader over them, for an
// optional-argument group whose members are parsed one by one.
func (r *argReader) sub(n int) *argReader {
	return &argReader{what: r.what, args: r.group(n)}
}

// ratio consumes "<a>/<b>".
func (r *argReader) ratio(arg string) (uint64, uint64, error) {
	s, err := r.next(arg)
	if err != nil {
		return 0, 0, err
	}
	as, bs, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, r.fail(arg, s, errors.New("want <used>/<total>"))
	}
	a, err := strconv.ParseUint(as, 10, 64)
	if err != nil {
		return 0, 0, r.fail(arg, s, numErr(err))
	}
	b, err := strconv.ParseUint(bs, 10, 64)
	if err != nil {
		return 0, 0, r.fail(arg, s, numErr(err))
	}
	return a, b, nil
}

// done fails if arguments are left over.
func (r *argReader) done() error {
	if r.pos < len(r.args) {
		return r.fail("argument", r.args[r.pos], errTrailing)
	}
	return nil
}

// numErr strips strconv's "parsing ...:" prefix; the ParseError already
// names the token.
func numErr(err error) error {
	var ne *strconv.NumError
	if errors.As(err, &ne) {
		return ne.Err
	}
	return err
}

func utoa(v uint64) string { return strconv.FormatUint(v, 10) }
