// SPDX-License-Identifier: Apache-2.0

package etcdserver

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/etcdserver/api/membership"
)

// IsLeader reports whether the member leads its cluster, for tests that
// stop the leader.
func (s *Server) IsLeader() bool { return s.etcd.Server.Leader() == s.etcd.Server.MemberID() }

// ReplaceMember does what `etcdctl member remove` then `etcdctl member
// add` do: drops the member named old from the cluster, if still listed,
// and adds one at peerURL, which then starts with ClusterExisting. A
// retry after a failed add only adds.
func (s *Server) ReplaceMember(ctx context.Context, old, peerURL string) error {
	for _, m := range s.etcd.Server.Cluster().Members() {
		if m.Name == old {
			if _, err := s.etcd.Server.RemoveMember(ctx, uint64(m.ID)); err != nil {
				return err
			}
		}
	}
	urls, err := types.NewURLs([]string{peerURL})
	if err != nil {
		return err
	}
	now := time.Now()
	_, err = s.etcd.Server.AddMember(ctx, *membership.NewMember("", urls, "", &now))
	return err
}
