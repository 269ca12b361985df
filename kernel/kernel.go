// SPDX-License-Identifier: Apache-2.0

// Package kernel owns what tidecache requires from the Linux kernel: the
// modules it loads (modules.txt) and the configuration options it relies on
// (config.fragment). Both files are embedded, so every binary and test that
// needs the lists reads the same single copy.
//
// The VM harness (tests/vm) builds its initramfs from the "initramfs" section
// and has its guest agent load the "runtime" section; the "on demand" section
// lists what the kernel or tidecached loads at first use. `go test ./kernel/`
// checks that the host's kernel has every module, and the fragment against
// its /boot/config-<kver>.
package kernel

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"
)

//go:embed modules.txt
var modulesText string

//go:embed config.fragment
var configText string

// Section says when a module is loaded.
type Section string

const (
	// Initramfs modules are copied into the VM's initramfs and loaded by its
	// /init before the host root is mounted.
	Initramfs Section = "initramfs"
	// Runtime modules are loaded once the root filesystem is up.
	Runtime Section = "runtime"
	// OnDemand modules are not loaded ahead: the kernel asks modprobe for
	// them at first use (a dm target by its table, an md personality by
	// its level, a filesystem by mount), or tidecached loads them itself
	// (nvme-tcp, nvmet-tcp), as on a server that boots without a list.
	OnDemand Section = "on demand"
)

// Module is one entry of modules.txt.
type Module struct {
	Name     string  // modprobe name, e.g. "dm-writecache"
	Section  Section // when it is loaded
	Optional bool    // "name?" in the file: may be absent on some kernels
}

// ModuleList returns every module of the embedded modules.txt in file order.
func ModuleList() []Module {
	mods, err := ParseModules(modulesText)
	if err != nil {
		// The file is embedded: a parse error is a build-time bug that the
		// package's tests catch.
		panic("kernel: embedded modules.txt: " + err.Error())
	}
	return mods
}

// Modules returns the module names of the two sections of modules.txt that
// are loaded ahead, in file order, without the optional marker.
func Modules() (initramfs, runtime []string) {
	for _, m := range ModuleList() {
		switch m.Section {
		case Initramfs:
			initramfs = append(initramfs, m.Name)
		case Runtime:
			runtime = append(runtime, m.Name)
		}
	}
	return initramfs, runtime
}

// ParseModules parses the modules.txt format:
//
//	file    = { line }
//	line    = blank | comment | section | module
//	section = "# initramfs" | "# runtime" | "# on demand"   (exactly, after trimming)
//	comment = "#" any other text
//	module  = name [ "?" ]                   (name: letters, digits, "-", "_")
//
// A module line before the first section header is an error, and so is a
// name listed twice.
func ParseModules(text string) ([]Module, error) {
	var (
		mods    []Module
		section Section
		seen    = map[string]int{}
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#"):
			switch strings.TrimSpace(strings.TrimPrefix(line, "#")) {
			case string(Initramfs):
				section = Initramfs
			case string(Runtime):
				section = Runtime
			case string(OnDemand):
				section = OnDemand
			}
			continue
		}
		if section == "" {
			return nil, fmt.Errorf("line %d: module %q before a section header (# initramfs, # runtime or # on demand)", n, line)
		}
		m := Module{Name: line, Section: section}
		if name, ok := strings.CutSuffix(line, "?"); ok {
			m.Name, m.Optional = name, true
		}
		if !validModuleName(m.Name) {
			return nil, fmt.Errorf("line %d: bad module name %q", n, line)
		}
		key := CanonicalModuleName(m.Name)
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("line %d: module %q already listed on line %d", n, m.Name, prev)
		}
		seen[key] = n
		mods = append(mods, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return mods, nil
}

// CanonicalModuleName returns the name as the kernel shows it in
// /proc/modules: dashes become underscores.
func CanonicalModuleName(name string) string {
	return strings.ReplaceAll(name, "-", "_")
}

func validModuleName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Option is one required kernel configuration option.
type Option struct {
	Name  string // e.g. "CONFIG_DM_WRITECACHE"
	Value string // "y", or "m" meaning "m or y"
}

// Fragment returns the options of the embedded config.fragment.
func Fragment() []Option {
	opts, err := ParseFragment(configText)
	if err != nil {
		panic("kernel: embedded config.fragment: " + err.Error())
	}
	return opts
}

// ParseFragment parses a config fragment: "CONFIG_NAME=value" lines, blank
// lines and "#" comments.
func ParseFragment(text string) ([]Option, error) {
	var opts []Option
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "CONFIG_") || value == "" {
			return nil, fmt.Errorf("line %d: want CONFIG_NAME=value, got %q", n, line)
		}
		if seen[name] {
			return nil, fmt.Errorf("line %d: %s listed twice", n, name)
		}
		seen[name] = true
		opts = append(opts, Option{Name: name, Value: value})
	}
	return opts, sc.Err()
}

// ParseConfig parses a kernel .config (such as /boot/config-<kver>) into a
// map from option name to value. "# CONFIG_X is not set" lines map to "n".
func ParseConfig(text string) map[string]string {
	cfg := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			if name, ok := strings.CutSuffix(rest, " is not set"); ok && strings.HasPrefix(name, "CONFIG_") {
				cfg[name] = "n"
			}
			continue
		}
		if name, value, ok := strings.Cut(line, "="); ok && strings.HasPrefix(name, "CONFIG_") {
			cfg[name] = strings.Trim(value, `"`)
		}
	}
	return cfg
}

// ErrConfigMismatch is wrapped by CheckConfig's error.
var ErrConfigMismatch = errors.New("kernel config does not meet requirements")

// CheckConfig reports every option of want that have does not satisfy: a
// wanted "m" is met by "m" or "y", any other value must match exactly. The
// error wraps ErrConfigMismatch and names each unmet option.
func CheckConfig(want []Option, have map[string]string) error {
	var bad []string
	for _, o := range want {
		got, ok := have[o.Name]
		switch {
		case !ok || got == "n":
			bad = append(bad, fmt.Sprintf("%s=%s (not set)", o.Name, o.Value))
		case o.Value == "m" && (got == "m" || got == "y"):
		case got != o.Value:
			bad = append(bad, fmt.Sprintf("%s=%s (have %s)", o.Name, o.Value, got))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%w: %s", ErrConfigMismatch, strings.Join(bad, ", "))
}
