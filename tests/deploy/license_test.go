// SPDX-License-Identifier: Apache-2.0

package deploy_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLicenseHeaders: every source file carries an SPDX licence
// identifier in its first lines: GPL-2.0 for the kernel modules (the
// kernel requires it), Apache-2.0 for everything else; the licence texts
// are in the tree, and the Debian copyright file names both.
func TestLicenseHeaders(t *testing.T) {
	root := filepath.Join("..", "..")
	sources := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".cache", "build", "vm", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		var want string
		switch filepath.Ext(path) {
		case ".go", ".sh":
			want = "Apache-2.0"
		case ".c", ".h":
			want = "GPL-2.0"
		default:
			return nil
		}
		if dir, _ := filepath.Split(rel); strings.HasPrefix(dir, filepath.Join("kernel", "dm-")) {
			want = "GPL-2.0" // a kernel module's own tree
		}
		sources++
		if got := spdx(t, path); got != want {
			t.Errorf("%s: SPDX-License-Identifier %q in its first lines, want %q", rel, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sources < 100 {
		t.Fatalf("checked %d source files: the walk missed the tree", sources)
	}
	for file, want := range map[string]string{
		"LICENSE":                    "Apache License",
		"LICENSES/Apache-2.0.txt":    "Apache License",
		"LICENSES/GPL-2.0-only.txt":  "GNU GENERAL PUBLIC LICENSE",
		"deploy/debian/copyright":    "License: GPL-2.0-only",
		"deploy/debian/changelog.in": "tidecache (@VERSION@)",
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("%s: %v, or it lacks %q", file, err, want)
		}
	}
}

// spdx returns the licence identifier of the first five lines of a file.
func spdx(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for i := 0; i < 5 && sc.Scan(); i++ {
		if _, id, ok := strings.Cut(sc.Text(), "SPDX-License-Identifier:"); ok {
			return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(id), "*/"))
		}
	}
	return ""
}
