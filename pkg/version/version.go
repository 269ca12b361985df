// SPDX-License-Identifier: Apache-2.0

// Package version carries the build version stamped by the Makefile with
// -ldflags, so every binary reports what it was built from.
package version

// Version is set at link time; "dev" for plain `go build`.
var Version = "dev"
