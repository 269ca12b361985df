// SPDX-License-Identifier: Apache-2.0

package nvmeauth

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/tidecache/tidecache/pkg/atomicfile"
)

// Keyring is what one node keeps of NVMe authentication, in a directory
// only root reads (0700, files 0600): its key pair, the secret it makes
// for each host it exports to, and the secret each exporter made for it.
// It survives restarts, so a daemon that starts without etcd still
// serves its hosts with the keys they hold, and still connects.
type Keyring struct {
	dir string
	mu  sync.Mutex
	// state is the whole keyring, written again on every change: a
	// cluster has tens of nodes, not thousands.
	state keyringState
}

type keyringState struct {
	Public  []byte `json:"public"`
	Private []byte `json:"private"`
	// Generation is the rotation this node's export secrets belong to
	// (api.NodeSpec.RotateNVMeSecrets): 0 until the first rotation.
	Generation int64 `json:"generation"`
	// Hosts are the secrets this node's target requires, by host node.
	Hosts map[string]string `json:"hosts,omitempty"`
	// Exporters are the secrets this node presents, by exporting node.
	Exporters map[string]Received `json:"exporters,omitempty"`
}

// Received is a secret an exporter made for this node.
type Received struct {
	Secret     string `json:"secret"`
	Generation int64  `json:"generation"`
	// Sealed is the record it came in: a record sealed anew (the
	// exporter's keyring lost and made again) is opened again even in
	// the same generation.
	Sealed string `json:"sealed,omitempty"`
}

// keyringFile is the keyring's file in its directory.
const keyringFile = "keyring.json"

// OpenKeyring reads the keyring in dir, making the directory and a key
// pair the first time.
func OpenKeyring(dir string) (*Keyring, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("NVMe keyring: %w", err)
	}
	// MkdirAll keeps the mode of a directory that exists: tighten it.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("NVMe keyring: %w", err)
	}
	k := &Keyring{dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, keyringFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		kp, err := NewKeyPair(rand.Reader)
		if err != nil {
			return nil, err
		}
		k.state.Public, k.state.Private = kp.Public[:], kp.Private[:]
		if err := k.save(); err != nil {
			return nil, err
		}
		return k, nil
	case err != nil:
		return nil, fmt.Errorf("NVMe keyring: %w", err)
	}
	if err := json.Unmarshal(b, &k.state); err != nil {
		return nil, fmt.Errorf("NVMe keyring %s: %w", filepath.Join(dir, keyringFile), err)
	}
	if len(k.state.Public) != 32 || len(k.state.Private) != 32 {
		return nil, fmt.Errorf("NVMe keyring %s: no key pair", filepath.Join(dir, keyringFile))
	}
	return k, nil
}

// save writes the keyring; the caller holds mu (or owns k alone).
func (k *Keyring) save() error {
	b, err := json.Marshal(k.state)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(k.dir, keyringFile), b, 0o600); err != nil {
		return fmt.Errorf("NVMe keyring: %w", err)
	}
	return nil
}

// KeyPair returns the node's sealing key pair.
func (k *Keyring) KeyPair() KeyPair {
	k.mu.Lock()
	defer k.mu.Unlock()
	var kp KeyPair
	copy(kp.Public[:], k.state.Public)
	copy(kp.Private[:], k.state.Private)
	return kp
}

// HostSecret returns the secret this node's target requires of host,
// making it the first time, and the rotation it belongs to.
func (k *Keyring) HostSecret(host string) (secret string, generation int64, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.state.Hosts[host]; ok {
		return s, k.state.Generation, nil
	}
	s, err := NewSecret(rand.Reader)
	if err != nil {
		return "", 0, err
	}
	if k.state.Hosts == nil {
		k.state.Hosts = map[string]string{}
	}
	k.state.Hosts[host] = s
	if err := k.save(); err != nil {
		delete(k.state.Hosts, host)
		return "", 0, err
	}
	return s, k.state.Generation, nil
}

// Existing returns the secret this node's target requires of host, if it
// made one (and no rotation since).
func (k *Keyring) Existing(host string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.state.Hosts[host]
	return s, ok
}

// Generation is the rotation this node's export secrets belong to.
func (k *Keyring) Generation() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.state.Generation
}

// Rotate forgets every export secret, so new ones are made as hosts are
// served again, and records generation (an api.NodeSpec rotation
// request) as done. An older or equal generation changes nothing.
func (k *Keyring) Rotate(generation int64) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if generation <= k.state.Generation {
		return false, nil
	}
	old, oldGen := k.state.Hosts, k.state.Generation
	k.state.Hosts, k.state.Generation = nil, generation
	if err := k.save(); err != nil {
		k.state.Hosts, k.state.Generation = old, oldGen
		return false, err
	}
	return true, nil
}

// Received returns the secret exporter made for this node, if any.
func (k *Keyring) Received(exporter string) (Received, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.state.Exporters[exporter]
	return r, ok
}

// Receive keeps the secret exporter made for this node.
func (k *Keyring) Receive(exporter string, r Received) error {
	if err := ValidSecret(r.Secret); err != nil {
		return fmt.Errorf("secret from %s: %w", exporter, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur, ok := k.state.Exporters[exporter]; ok && cur == r {
		return nil
	}
	old, had := k.state.Exporters[exporter]
	if k.state.Exporters == nil {
		k.state.Exporters = map[string]Received{}
	}
	k.state.Exporters[exporter] = r
	if err := k.save(); err != nil {
		if had {
			k.state.Exporters[exporter] = old
		} else {
			delete(k.state.Exporters, exporter)
		}
		return err
	}
	return nil
}
