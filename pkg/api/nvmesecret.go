// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/base64"
	"errors"
	"fmt"
)

// NVMeSecret is the NVMe in-band authentication secret an exporting node
// made for one host, sealed to the host's public key (Node.NVMeAuthKey),
// so only that host can open it (pkg/nvmeauth). The exporter writes it;
// the host reads it before it connects.
type NVMeSecret struct {
	Exporter string `json:"exporter"`
	Host     string `json:"host"`
	// Generation is the exporter's rotation the secret belongs to
	// (NodeSpec.RotateNVMeSecrets; 0 before the first): a host that holds
	// an older one takes the new one, on its live connections too.
	Generation int64 `json:"generation"`
	// Sealed is the secret sealed to the host's key, in base64.
	Sealed string `json:"sealed"`
	// HostKey is the host's public key it was sealed to: a host that
	// made a new key pair ignores a secret sealed to the old one.
	HostKey string `json:"hostKey"`
}

// Name is the record's name: "<exporter>/<host>".
func (s NVMeSecret) Name() string { return s.Exporter + "/" + s.Host }

// Validate checks the record on its own.
func (s NVMeSecret) Validate() error {
	if err := ValidateNodeName(s.Exporter); err != nil {
		return fmt.Errorf("exporter: %w", err)
	}
	if err := ValidateNodeName(s.Host); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if s.Exporter == s.Host {
		return errors.New("a node does not export to itself over NVMe/TCP")
	}
	if s.Generation < 0 {
		return fmt.Errorf("generation %d: want 0 or more", s.Generation)
	}
	if _, err := base64.StdEncoding.DecodeString(s.Sealed); err != nil || s.Sealed == "" {
		return errors.New("sealed: want the sealed secret in base64")
	}
	if b, err := base64.StdEncoding.DecodeString(s.HostKey); err != nil || len(b) != 32 {
		return errors.New("hostKey: want a 32-byte public key in base64")
	}
	return nil
}
