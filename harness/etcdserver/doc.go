// Package etcdserver gives tests etcd servers (the etcd binary, 3.4 on
// Debian 12) started by the [harness] and reached with clientv3.
//
// [Shared] is the package's shared single-member server with a key prefix
// of the calling test's own, deleted when the test ends. [New] starts a
// single member for one test and [NewCluster] a cluster, to fault through
// their [harness.Server] handles; [Cluster.Leader] says which member leads.
//
// The test package's TestMain calls harness.Main. With
// FENCEGUARD_ETCD_ENDPOINTS set, Shared uses that cluster. For etcd inside
// the test process, see harness/etcdembed.
package etcdserver
