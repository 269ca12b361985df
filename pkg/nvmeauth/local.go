// SPDX-License-Identifier: Apache-2.0

package nvmeauth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// DirName is the keyring's directory in tidecached's state directory.
const DirName = "nvme-auth"

// DefaultDir is the keyring of tidecached's default state directory.
const DefaultDir = "/var/lib/tidecache/" + DirName

// Local gives the secrets the node's keyring already holds, without etcd:
// what tidectl's local mode presents when it attaches a peer leg of a
// volume the daemon set up, and requires when it exports. It makes none:
// the daemon makes and hands out secrets.
type Local struct{ Ring *Keyring }

// OpenLocal opens the keyring in dir if the daemon made one (its kernel
// has in-band authentication); ok is false if there is none.
func OpenLocal(dir string) (l Local, ok bool, err error) {
	if _, err := os.Stat(filepath.Join(dir, keyringFile)); err != nil {
		// None, or not ours to read (not root): the engine says what
		// else it cannot open.
		return Local{}, false, nil
	}
	ring, err := OpenKeyring(dir)
	if err != nil {
		return Local{}, false, err
	}
	return Local{Ring: ring}, true, nil
}

// HostSecret is the secret exporter made for this node, none if it made
// none (it requires none, or the daemon has not received it yet).
func (l Local) HostSecret(_ context.Context, exporter string) (string, error) {
	r, _ := l.Ring.Received(exporter)
	return r.Secret, nil
}

// ExportKey is the secret this node requires of host; a host the daemon
// made none for is refused, since the daemon alone can tell whether it
// authenticates.
func (l Local) ExportKey(_ context.Context, host string) (string, error) {
	if s, ok := l.Ring.Existing(host); ok {
		return s, nil
	}
	return "", fmt.Errorf("no NVMe secret for node %s in %s: tidecached makes it when it serves the node", host, l.Ring.dir)
}
