// Package zkserver gives tests ZooKeeper servers (QuorumPeerMain from
// Debian's zookeeper package) started by the [harness] and reached with
// go-zookeeper.
//
// [Shared] is the package's shared server with a chroot of the calling
// test's own, deleted with everything below it when the test ends
// (go-zookeeper takes no chroot: put DB.Chroot in front of every path).
// [New] starts a standalone server for one test and [NewEnsemble] an
// ensemble, to fault through their [harness.Server] handles;
// [Ensemble.Leader] and [Ensemble.Roles] say who leads. A client
// connected to one member reads what that member has applied, which may
// lag the leader.
//
// The test package's TestMain calls harness.Main. With
// FENCEGUARD_ZK_ADDRS set, Shared uses that ensemble.
package zkserver
