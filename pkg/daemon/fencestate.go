// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/tidecache/tidecache/pkg/atomicfile"
)

// The fences a node's target applies are kept on its local disk too, so
// that they hold across a restart of the daemon (or a reboot of the node)
// while etcd cannot be reached. Without them the target, finding the
// cluster silent, would export the replica of a fenced owner again: the
// owner, cut off from the others but not from this node, would write to
// it while its volume runs on another node since the failover.
//
// The file mirrors the last fence list read from etcd: a fence etcd no
// longer holds (lifted) goes from the file with the next list read, never
// before.

// fencesFile is the file, in Config.StateDir, that holds the fences.
const fencesFile = "fences.json"

// fenceState is the content of fencesFile.
type fenceState struct {
	// Fenced is the ModRevision of each fenced node's fence record.
	Fenced map[string]int64 `json:"fenced"`
}

// loadFences reads the fences the last run saved in dir; none if it saved
// none.
func loadFences(dir string) (map[string]int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, fencesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]int64{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read saved fences: %w", err)
	}
	var st fenceState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read saved fences %s: %w", filepath.Join(dir, fencesFile), err)
	}
	if st.Fenced == nil {
		st.Fenced = map[string]int64{}
	}
	return st.Fenced, nil
}

// saveFences replaces the saved fences in dir with fenced, durably
// (atomicfile.Write).
func saveFences(dir string, fenced map[string]int64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save fences: %w", err)
	}
	b, err := json.Marshal(fenceState{Fenced: fenced})
	if err != nil {
		return fmt.Errorf("save fences: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, fencesFile), b, 0o600); err != nil {
		return fmt.Errorf("save fences in %s: %w", dir, err)
	}
	return nil
}

// restoreFences puts the fences saved by the last run in place before the
// target's first round, so they apply even if etcd never answers.
func (d *daemon) restoreFences() {
	fenced, err := loadFences(d.cfg.StateDir)
	if err != nil {
		d.log.Error("saved fences unreadable: until etcd answers, no fence from the last run applies", "err", err)
		return
	}
	if len(fenced) > 0 {
		d.log.Warn("fences of the last run applied until etcd says otherwise", "fenced", slices.Sorted(maps.Keys(fenced)))
	}
	s := &d.tgt
	s.mu.Lock()
	s.fenced = fenced
	s.saved = maps.Clone(fenced)
	s.mu.Unlock()
}

// persistFences saves the fence list just read from etcd if it differs
// from what is saved. A failure is logged: the fences apply in memory, and
// the next round tries again.
func (d *daemon) persistFences(fenced map[string]int64) {
	s := &d.tgt
	s.mu.Lock()
	same := s.saved != nil && maps.Equal(s.saved, fenced)
	s.mu.Unlock()
	if same {
		return
	}
	if err := saveFences(d.cfg.StateDir, fenced); err != nil {
		d.log.Error("fences not saved: a restart without etcd would not apply them", "err", err)
		return
	}
	s.mu.Lock()
	s.saved = maps.Clone(fenced)
	s.mu.Unlock()
}
