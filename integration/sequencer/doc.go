// Package sequencer checks forged and stale tokens at the resource: the
// SequencerCheck with queued waiters on Redis, etcd and ZooKeeper, its cache
// after a counter's recovery, Sequencers and Fences on Redis replicas
// (plain, Sentinel-routed) and fences through the members of an etcd
// cluster and a ZooKeeper ensemble whose followers lag.
package sequencer
