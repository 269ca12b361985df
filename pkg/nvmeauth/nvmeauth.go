// SPDX-License-Identifier: Apache-2.0

// Package nvmeauth makes, keeps and hands out the secrets of NVMe in-band
// authentication (DH-HMAC-CHAP), which lets a node's NVMe/TCP target
// admit a host by what the host knows instead of by the host NQN it
// declares (anyone can declare any NQN).
//
// Each exporting node makes one secret per host it serves: the kernel's
// target keeps one key per host NQN (nvmet's hosts/<nqn>/dhchap_key), and
// a secret per (exporter, host) pair means one leaked secret opens one
// node's exports to one impersonator, not the cluster's. The exporter
// keeps its secrets in its state directory (root only) and hands each
// host its own through etcd, sealed to the host's public key (NaCl's
// anonymous box: X25519 and XSalsa20-Poly1305), so that only that host
// and the exporter can read it: other nodes, and whoever reads etcd,
// see ciphertext.
package nvmeauth

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"golang.org/x/crypto/nacl/box"
)

// secretBytes is the length of a secret's key: 32 bytes, the size of
// the SHA-256 HMAC's key, one of the lengths the NVMe specification
// allows (32, 48, 64).
const secretBytes = 32

// NewSecret returns a fresh secret in the NVMe specification's
// representation, "DHHC-1:00:<base64 of key and CRC-32>:", which both
// the kernel's host (the connect option dhchap_secret) and target
// (dhchap_key) take. "00" says the key is used as it is (no transform):
// the target's hash (hmac(sha256), nvmet's default) does the rest.
func NewSecret(r io.Reader) (string, error) {
	key := make([]byte, secretBytes)
	if _, err := io.ReadFull(r, key); err != nil {
		return "", fmt.Errorf("make NVMe secret: %w", err)
	}
	return encodeSecret(key), nil
}

func encodeSecret(key []byte) string {
	// The kernel checks the CRC-32 (IEEE), stored after the key in
	// little-endian order (nvme_auth_extract_key).
	b := binary.LittleEndian.AppendUint32(bytes.Clone(key), crc32.ChecksumIEEE(key))
	return "DHHC-1:00:" + base64.StdEncoding.EncodeToString(b) + ":"
}

// ValidSecret checks a secret's representation as the kernel will: the
// prefix, a key of 32, 48 or 64 bytes, and its CRC.
func ValidSecret(s string) error {
	rest, ok := strings.CutPrefix(s, "DHHC-1:")
	if !ok || len(rest) < 4 || rest[2] != ':' || !strings.HasSuffix(rest, ":") {
		return errors.New(`NVMe secret: want "DHHC-1:<hash>:<base64>:"`)
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(rest[3:], ":"))
	if err != nil {
		return fmt.Errorf("NVMe secret: %w", err)
	}
	if n := len(b) - 4; n != 32 && n != 48 && n != 64 {
		return fmt.Errorf("NVMe secret: a key of %d bytes, want 32, 48 or 64", max(n, 0))
	}
	key := b[:len(b)-4]
	if binary.LittleEndian.Uint32(b[len(b)-4:]) != crc32.ChecksumIEEE(key) {
		return errors.New("NVMe secret: CRC mismatch")
	}
	return nil
}

// KeyPair is a node's sealing key pair: peers seal the secrets they make
// for this node to Public, and only Private opens them.
type KeyPair struct {
	Public, Private [32]byte
}

// NewKeyPair makes a key pair.
func NewKeyPair(r io.Reader) (KeyPair, error) {
	pub, priv, err := box.GenerateKey(r)
	if err != nil {
		return KeyPair{}, fmt.Errorf("make NVMe sealing key: %w", err)
	}
	return KeyPair{Public: *pub, Private: *priv}, nil
}

// PublicString is the public key as a node record publishes it.
func (k KeyPair) PublicString() string { return base64.StdEncoding.EncodeToString(k.Public[:]) }

// ParsePublic reads a public key published by PublicString.
func ParsePublic(s string) ([32]byte, error) {
	var pub [32]byte
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != len(pub) {
		return pub, fmt.Errorf("NVMe sealing key %q: want 32 bytes in base64", s)
	}
	copy(pub[:], b)
	return pub, nil
}

// Seal seals secret to the holder of the public key pub (base64, as a
// node record publishes it); the result is base64.
func Seal(secret, pub string) (string, error) {
	key, err := ParsePublic(pub)
	if err != nil {
		return "", err
	}
	sealed, err := box.SealAnonymous(nil, []byte(secret), &key, rand.Reader)
	if err != nil {
		return "", fmt.Errorf("seal NVMe secret: %w", err)
	}
	return base64.StdEncoding.EncodeToString(sealed), nil
}

// Open opens what Seal sealed to this key pair and checks it is a secret.
func (k KeyPair) Open(sealed string) (string, error) {
	b, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return "", fmt.Errorf("open NVMe secret: %w", err)
	}
	out, ok := box.OpenAnonymous(nil, b, &k.Public, &k.Private)
	if !ok {
		return "", errors.New("open NVMe secret: not sealed to this node's key (made for an older key, or damaged)")
	}
	if err := ValidSecret(string(out)); err != nil {
		return "", fmt.Errorf("open NVMe secret: %w", err)
	}
	return string(out), nil
}
