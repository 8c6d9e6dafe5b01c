package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/locks/redislock"
)

// redisClusterLock is redislock through a go-redis ClusterClient on a Redis
// Cluster of three masters with a replica each, the cell's own.
const redisClusterLock = "redis-cluster"

// newClusterLockService starts the cell's cluster. The clients are seeded
// with every node; the victim's proxies (one per node, made by
// newLockService) are reached through lockConfig.AddrMap, because a
// ClusterClient connects to the addresses CLUSTER SLOTS names, not to its
// seeds: the map sends each node's address to the node's proxy.
func newClusterLockService(t *testing.T, s *lockService, lc *lockConfig) {
	t.Helper()
	s.rcluster = redisserver.NewCluster(t, 3, 1)
	s.dedicated = s.rcluster.Nodes
	lc.Addrs, lc.Prefix = s.rcluster.Addrs(), "fg:faults:lock:"
}

// clusterAddrMap maps each node's address to the victim's proxy in front of
// it.
func clusterAddrMap(nodes []string, proxies []*harness.Proxy) map[string]string {
	m := map[string]string{}
	for i, a := range nodes {
		m[a] = proxies[i].Addr()
	}
	return m
}

// openClusterLocker is openLocker for redis-cluster.
func openClusterLocker(lc lockConfig) (locks.Locker, func() error, error) {
	var d net.Dialer
	cli := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:       lc.Addrs,
		DialTimeout: time.Second, DialerRetries: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if to, ok := lc.AddrMap[addr]; ok {
				addr = to
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	l, err := redislock.New(cli, redislock.Options{Prefix: lc.Prefix})
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return l, func() error { return errors.Join(l.Close(), cli.Close()) }, nil
}

// clusterKillNemesis: the master that holds the forced item's lock is
// killed (SIGKILL) while c1 holds it; the cluster promotes its replica
// (after cluster-node-timeout and an election, 2-3 s), which lets c1's
// grant expire, and c2 takes the lock there. The old master is restarted
// with its data and rejoins as the new master's replica; the next run
// kills the other one.
func clusterKillNemesis(n *nemesis, c *cell) {
	cl := c.svc.rcluster
	n.lane = -1
	n.label = "the lock's Redis Cluster master KILLED, replica promoted"
	var killed *harness.Server
	n.inject = func(ctx context.Context, r *run) error {
		m, err := cl.MasterForKey(ctx, c.svc.direct.Prefix+"{"+r.items[0]+"}")
		if err != nil {
			return err
		}
		killed = m
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := cl.KillFailover(fctx, m); err != nil {
			return fmt.Errorf("failover of %s: %w", m.Name(), err)
		}
		return nil
	}
	n.heal = func(ctx context.Context, r *run) error {
		if killed == nil {
			return nil
		}
		if err := killed.Start(false); err != nil {
			return err
		}
		killed = nil
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return cl.WaitHealthy(hctx)
	}
}
