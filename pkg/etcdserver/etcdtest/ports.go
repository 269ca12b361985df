// SPDX-License-Identifier: Apache-2.0

package etcdtest

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/tidecache/tidecache/internal/testnet"
)

// LoopbackURLs returns n distinct URLs scheme://127.0.0.1:port on ports
// free when it returned, outside the ephemeral range (see testnet). A
// member of a multi-member cluster needs them before it starts, since
// every member's initial cluster names every peer URL (port 0 cannot be
// advertised).
func LoopbackURLs(t testing.TB, scheme string, n int) []string {
	t.Helper()
	var urls []string
	for _, p := range testnet.LoopbackPorts(t, n) {
		urls = append(urls, (&url.URL{Scheme: scheme, Host: fmt.Sprintf("127.0.0.1:%d", p)}).String())
	}
	return urls
}
