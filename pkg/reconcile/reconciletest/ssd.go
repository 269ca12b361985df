// SPDX-License-Identifier: Apache-2.0

package reconciletest

import (
	"context"
	"slices"
	"sync"

	"github.com/tidecache/tidecache/pkg/api"
)

// SSDs is a settable SSD inventory (a reconcile.SSDSource).
type SSDs struct {
	mu   sync.Mutex
	ssds []api.SSDInventory
}

// Set replaces the inventory.
func (s *SSDs) Set(ssds ...api.SSDInventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ssds = ssds
}

// SSDs returns the inventory.
func (s *SSDs) SSDs(ctx context.Context) ([]api.SSDInventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ssds), nil
}
