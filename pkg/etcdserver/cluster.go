// SPDX-License-Identifier: Apache-2.0

package etcdserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Values of Config.InitialClusterState.
const (
	// ClusterNew: the members named in InitialCluster form a cluster
	// together, each started with the same InitialCluster and token.
	ClusterNew = "new"
	// ClusterExisting: this member joins a running cluster that already
	// lists it (etcdctl member add), e.g. to replace a dead member.
	ClusterExisting = "existing"
)

// DefaultClusterToken is the InitialClusterToken of a multi-member cluster
// that sets none. Every member must use the same token; a second
// tidecache cluster on the same network should use another, so that
// members of two clusters never mistake each other for peers.
const DefaultClusterToken = "tidecache-cluster"

// Member is one entry of an initial cluster: a member name and the peer
// URL the other members dial it on.
type Member struct {
	Name    string
	PeerURL *url.URL
}

// clusterMode reports whether c describes a member of a multi-member
// cluster (InitialCluster set) rather than the single member.
func (c Config) clusterMode() bool { return c.InitialCluster != "" }

// peerTLS reports whether any peer TLS file is set.
func (c Config) peerTLS() bool {
	return c.PeerCertFile != "" || c.PeerKeyFile != "" || c.PeerCAFile != ""
}

// ParseInitialCluster parses "name=peerURL,name=peerURL,..." (etcd's
// --initial-cluster) and checks each entry: a name, an http:// peer URL
// (https:// when tls) on an IP address and a real port, and no name or URL
// given twice. Members keep the order given.
func ParseInitialCluster(s string, tls bool) ([]Member, error) {
	var members []Member
	names := map[string]bool{}
	urls := map[string]string{}
	for _, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		name, raw, ok := strings.Cut(entry, "=")
		if !ok || name == "" || raw == "" {
			return nil, fmt.Errorf("etcdserver: InitialCluster entry %q: want name=peerURL", entry)
		}
		if names[name] {
			return nil, fmt.Errorf("etcdserver: InitialCluster names member %q twice", name)
		}
		u, err := parseAdvertisedURL("InitialCluster member "+name, raw, tls)
		if err != nil {
			return nil, err
		}
		if other, dup := urls[u.Host]; dup {
			return nil, fmt.Errorf("etcdserver: InitialCluster gives members %q and %q the same peer address %s", other, name, u.Host)
		}
		names[name], urls[u.Host] = true, name
		members = append(members, Member{Name: name, PeerURL: &url.URL{Scheme: u.Scheme, Host: u.Host}})
	}
	return members, nil
}

// parseAdvertisedURL is parseURL for a URL that other machines dial: it
// must name a port and an address they can reach, not 0 or 0.0.0.0.
func parseAdvertisedURL(field, s string, tls bool) (*url.URL, error) {
	u, err := parseURL(field, s, tls)
	if err != nil {
		return nil, err
	}
	if u.Port() == "0" {
		return nil, fmt.Errorf("etcdserver: %s %q: port 0: the other members dial this URL, give the port", field, s)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("etcdserver: %s %q: %s is no address the other members can dial, give this host's IP", field, s, u.Hostname())
	}
	return u, nil
}

// memberURL returns the peer URL members gives name, or nil.
func memberURL(members []Member, name string) *url.URL {
	for _, m := range members {
		if m.Name == name {
			return m.PeerURL
		}
	}
	return nil
}

func memberNames(members []Member) string {
	var n []string
	for _, m := range members {
		n = append(n, m.Name)
	}
	return strings.Join(n, ", ")
}

// validateCluster checks the multi-member settings of c (defaults
// applied): all of them need InitialCluster, which must name this member
// at its PeerURL.
func (c Config) validateCluster() error {
	if !c.clusterMode() {
		switch {
		case c.InitialClusterState != "":
			return errors.New("etcdserver: InitialClusterState is for a member of a multi-member cluster: set InitialCluster too (a single member always starts new)")
		case c.InitialClusterToken != "":
			return errors.New("etcdserver: InitialClusterToken is for a member of a multi-member cluster: set InitialCluster too")
		case c.peerTLS():
			return errors.New("etcdserver: PeerCertFile, PeerKeyFile and PeerCAFile secure the traffic between members: set InitialCluster too (a single member has no peers)")
		case c.HeartbeatInterval != 0 || c.ElectionTimeout != 0:
			return errors.New("etcdserver: HeartbeatInterval and ElectionTimeout time the elections between members: set InitialCluster too (a single member has no elections to tune)")
		}
		return nil
	}
	if err := c.validateRaftTiming(); err != nil {
		return err
	}
	if c.peerTLS() && (c.PeerCertFile == "" || c.PeerKeyFile == "" || c.PeerCAFile == "") {
		return errors.New("etcdserver: PeerCertFile, PeerKeyFile and PeerCAFile must be set together: members authenticate each other with certificates of that CA (mutual TLS), or peer traffic is plaintext")
	}
	switch c.InitialClusterState {
	case ClusterNew, ClusterExisting:
	default:
		return fmt.Errorf("etcdserver: InitialClusterState %q: want %q or %q", c.InitialClusterState, ClusterNew, ClusterExisting)
	}
	members, err := ParseInitialCluster(c.InitialCluster, c.peerTLS())
	if err != nil {
		return err
	}
	own := memberURL(members, c.Name)
	if own == nil {
		return fmt.Errorf("etcdserver: Name %q is not in InitialCluster (%s): every member, this one too, must be listed", c.Name, memberNames(members))
	}
	if peer, err := parseURL("PeerURL", c.PeerURL, c.peerTLS()); err != nil {
		return err
	} else if peer.Scheme != own.Scheme || peer.Host != own.Host {
		return fmt.Errorf("etcdserver: PeerURL %q differs from %q, member %q's entry in InitialCluster: the other members would dial the wrong address", c.PeerURL, own, c.Name)
	}
	if _, err := parseAdvertisedURL("ClientURL", c.ClientURL, c.CertFile != ""); err != nil {
		return err
	}
	return nil
}

// validateRaftTiming checks HeartbeatInterval and ElectionTimeout as etcd
// would, but with the names tidecache's flags use: whole milliseconds, and
// an election timeout of at least five heartbeats (a follower must miss
// several before it calls an election) and at most etcd's 50 s.
func (c Config) validateRaftTiming() error {
	hb, el := c.HeartbeatInterval, c.ElectionTimeout
	if hb == 0 {
		hb = 100 * time.Millisecond
	}
	if el == 0 {
		el = time.Second
	}
	switch {
	case hb < time.Millisecond || hb%time.Millisecond != 0 || el%time.Millisecond != 0:
		return fmt.Errorf("etcdserver: HeartbeatInterval %s and ElectionTimeout %s must be whole milliseconds, the heartbeat at least 1ms", hb, el)
	case el < 5*hb:
		return fmt.Errorf("etcdserver: ElectionTimeout %s must be at least five times HeartbeatInterval %s", el, hb)
	case el > 50*time.Second:
		return fmt.Errorf("etcdserver: ElectionTimeout %s is above etcd's limit of 50s", el)
	}
	return nil
}
