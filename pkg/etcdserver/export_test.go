package etcdserver

// IsLeader reports whether the member leads its cluster, for tests that
// stop the leader.
func (s *Server) IsLeader() bool { return s.etcd.Server.Leader() == s.etcd.Server.MemberID() }
