// Package redisserver gives tests Redis servers — single, replicated,
// Sentinel, Cluster — started by the [harness] and reached with go-redis.
//
// [Shared] (and [SharedN] for independent servers, as Redlock wants) is
// the package's shared server with a key prefix of the calling test's
// own; its keys are deleted when the test ends. [New] and [NewN] start
// servers for one test, to fault through their [harness.Server] handles.
// [NewReplica] puts a replica behind a [harness.Proxy] so replication can
// be cut or delayed and the replica promoted; [NewSentinel] starts a
// primary, a replica and three sentinels and fails over
// ([Sentinel.Failover], [Sentinel.KillPrimary]); [NewCluster] starts a
// Redis Cluster that fails masters over ([Cluster.Failover],
// [Cluster.KillFailover]) and moves slots ([Cluster.Migrate], with a hook
// while clients get ASK). [KeySlot] is the cluster's hash slot of a key.
//
// The test package's TestMain calls harness.Main. With
// FENCEGUARD_REDIS_ADDRS set, Shared uses those servers; the other
// helpers always start redis-server themselves.
package redisserver
