// SPDX-License-Identifier: Apache-2.0

package nvmeauth

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFormat checks the representation against one computed apart
// (Python's zlib.crc32 and base64 on the same key); the kernel's own
// check of it runs in the VM (TestSpoofedHostNQNUnauthenticated).
func TestSecretFormat(t *testing.T) {
	// 32 bytes 0x00..0x1f and their CRC-32 (0x91267e8a), little-endian.
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i)
	}
	const want = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	if got := encodeSecret(key); got != want {
		t.Errorf("encodeSecret = %s, want %s", got, want)
	}
	s, err := NewSecret(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := ValidSecret(s); err != nil {
		t.Errorf("a new secret is not valid: %v", err)
	}
	for _, bad := range []string{
		"", "DHHC-1:00:", want[:len(want)-1], strings.Replace(want, "AAEC", "AAED", 1),
		"DHHC-1:00:" + "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=" + ":", // no CRC
	} {
		if err := ValidSecret(bad); err == nil {
			t.Errorf("ValidSecret(%q) = nil, want an error", bad)
		}
	}
}

// TestSeal: only the key pair a secret is sealed to opens it.
func TestSeal(t *testing.T) {
	host, err := NewKeyPair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewKeyPair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := NewSecret(rand.Reader)
	sealed, err := Seal(s, host.PublicString())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, strings.Split(s, ":")[2][:16]) {
		t.Fatal("the sealed form shows the secret")
	}
	if got, err := host.Open(sealed); err != nil || got != s {
		t.Errorf("host opens %q, %v; want the secret", got, err)
	}
	if _, err := other.Open(sealed); err == nil {
		t.Error("another node opened the host's secret")
	}
	if _, err := Seal(s, "not a key"); err == nil {
		t.Error("sealed to a bad public key")
	}
}

// TestKeyring keeps the key pair and the secrets across opens, in files
// only root reads, and rotates once per new generation.
func TestKeyring(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nvme-auth")
	k, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	s1, gen, err := k.HostSecret("b")
	if err != nil || gen != 0 {
		t.Fatalf("HostSecret: %v, generation %d", err, gen)
	}
	if again, _, _ := k.HostSecret("b"); again != s1 {
		t.Error("a second HostSecret made a new secret")
	}
	if sc, _, _ := k.HostSecret("c"); sc == s1 {
		t.Error("two hosts share a secret")
	}
	recv, _ := NewSecret(rand.Reader)
	if err := k.Receive("san", Received{Secret: recv, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if err := k.Receive("san", Received{Secret: "DHHC-1:00:bad:"}); err == nil {
		t.Error("kept a malformed secret")
	}

	for _, p := range []string{dir, filepath.Join(dir, keyringFile)} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: others may read it", p, fi.Mode().Perm())
		}
	}

	k2, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	if k2.KeyPair().Public != k.KeyPair().Public {
		t.Error("the key pair changed across opens")
	}
	if s, _, _ := k2.HostSecret("b"); s != s1 {
		t.Error("the host secret changed across opens")
	}
	if r, ok := k2.Received("san"); !ok || r.Secret != recv || r.Generation != 3 {
		t.Errorf("Received(san) = %+v, %v", r, ok)
	}

	if done, err := k2.Rotate(5); err != nil || !done {
		t.Fatalf("Rotate(5) = %v, %v", done, err)
	}
	s2, gen, _ := k2.HostSecret("b")
	if s2 == s1 || gen != 5 {
		t.Errorf("after rotation: same secret %v, generation %d, want a new one at 5", s2 == s1, gen)
	}
	if done, _ := k2.Rotate(5); done {
		t.Error("the same rotation ran twice")
	}
	if done, _ := k2.Rotate(4); done {
		t.Error("an older rotation ran")
	}
}

// TestLocal gives tidectl the secrets the daemon's keyring holds, makes
// none, and finds no keyring where the daemon made none.
func TestLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	if _, ok, err := OpenLocal(dir); ok || err != nil {
		t.Fatalf("OpenLocal without a keyring: ok %v, %v", ok, err)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("OpenLocal made a keyring")
	}
	k, err := OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	forB, _, _ := k.HostSecret("b")
	fromSan, _ := NewSecret(rand.Reader)
	if err := k.Receive("san", Received{Secret: fromSan}); err != nil {
		t.Fatal(err)
	}
	l, ok, err := OpenLocal(dir)
	if !ok || err != nil {
		t.Fatalf("OpenLocal: ok %v, %v", ok, err)
	}
	ctx := t.Context()
	if s, err := l.ExportKey(ctx, "b"); s != forB || err != nil {
		t.Errorf("ExportKey(b) = %q, %v", s, err)
	}
	if _, err := l.ExportKey(ctx, "c"); err == nil {
		t.Error("ExportKey made a secret for c")
	}
	if s, _ := l.HostSecret(ctx, "san"); s != fromSan {
		t.Errorf("HostSecret(san) = %q", s)
	}
	if s, _ := l.HostSecret(ctx, "other"); s != "" {
		t.Errorf("HostSecret(other) = %q, want none", s)
	}
}
