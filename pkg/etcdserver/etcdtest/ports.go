// SPDX-License-Identifier: Apache-2.0

package etcdtest

import (
	"net"
	"net/url"
	"testing"
)

// LoopbackURLs returns n distinct URLs scheme://127.0.0.1:port on ports
// that were free when it returned. A member of a multi-member cluster
// needs them before it starts, since every member's initial cluster names
// every peer URL (port 0 cannot be advertised). Another process may take
// such a port before the member binds it; the member then fails to start
// with "address already in use", rare enough for tests.
func LoopbackURLs(t testing.TB, scheme string, n int) []string {
	t.Helper()
	var urls []string
	// Hold every listener until all are chosen so no port comes twice.
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		urls = append(urls, (&url.URL{Scheme: scheme, Host: l.Addr().String()}).String())
	}
	return urls
}
