// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses of tidectl and tidecached, documented in docs/cli.md. A
// script can tell "the command could not run" (ExitError) from "it ran
// and found a problem" (ExitFound), and both from a typo (ExitUsage).
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitError: the command failed (device, kernel or etcd error, a
	// refusal to risk data, a timeout).
	ExitError = 1
	// ExitUsage: the command line is wrong (unknown command or flag, bad
	// value, missing argument, a flag the mode does not take). Nothing was
	// touched.
	ExitUsage = 2
	// ExitFound: a check ran and found what it looks for, e.g. `volume
	// check` found a volume's tables drifted from its layout.
	ExitFound = 3
)

// usageError marks an error in the command line itself.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// foundError marks a check that ran and found a problem.
type foundError struct{ err error }

func (e foundError) Error() string { return e.err.Error() }
func (e foundError) Unwrap() error { return e.err }

// Found marks err as a check's finding, for ExitFound.
func Found(err error) error { return foundError{err} }

// cobraUsage are the starts of the errors cobra itself returns for a bad
// command line before any RunE runs (required flags, flag groups, unknown
// commands); flag parse errors arrive through the FlagErrorFunc instead.
var cobraUsage = []string{
	"unknown command ",
	"required flag(s) ",
	"if any flags in the group ",
	"at least one of the flags in the group ",
	"unknown flag: ",
	"unknown shorthand flag: ",
}

// ExitCode maps an error returned by a command tree to the exit status.
func ExitCode(err error) int {
	var u usageError
	var f foundError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &u):
		return ExitUsage
	case errors.As(err, &f):
		return ExitFound
	}
	for _, prefix := range cobraUsage {
		if strings.HasPrefix(err.Error(), prefix) {
			return ExitUsage
		}
	}
	return ExitError
}

// MarkUsageErrors wraps the positional-argument check of every command in
// the tree so that a wrong number of arguments exits with ExitUsage. A
// command group ("tidectl volume") given an unknown subcommand fails too,
// suggesting the closest ones it has; cobra would print its help and exit
// 0.
func MarkUsageErrors(cmd *cobra.Command) {
	if cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = unknownCommand
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		MarkUsageErrors(c)
	}
}
