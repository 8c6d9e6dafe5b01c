package servers

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisReplication is a Redis master and a replica of it, started for the
// calling test alone (like [NewRedis]) and torn down when it ends. The
// replica replicates through Link, an in-process [Proxy] in front of the
// master, so a test can cut replication (Link.Cut) while clients keep
// reaching both servers directly, and resume it (Link.Restore: the replica
// reconnects and catches up within about a second).
//
// Both servers are [Server]s with every fault method; the replica keeps
// replicating across its own restarts. [RedisReplication.Promote] turns the
// replica into a master, as a failover would.
type RedisReplication struct {
	Master  *Server
	Replica *Server // read-only, started with --replicaof Link.Addr()
	Link    *Proxy  // the replica's connection to the master
}

// NewRedisReplication starts a master, a proxy in front of it and a replica
// replicating through the proxy, and returns once the replica is in sync.
func NewRedisReplication(t testing.TB) *RedisReplication {
	t.Helper()
	master := NewRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// Redis 7 waits 5s for more replicas before a diskless full sync.
	mc := newRedisClient(master.Addr())
	err := mc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err()
	mc.Close()
	if err != nil {
		t.Fatalf("servers: configuring %s: %v", master.Name(), err)
	}
	link := NewProxy(t, master.Addr())
	host, port, err := net.SplitHostPort(link.Addr())
	if err != nil {
		t.Fatal(err)
	}
	k := redisReplicaKind{redisKind: redisKind{bin: redisBinary()}, host: host, port: port}
	replica, err := launch(k, "redis", 1)
	if replica != nil {
		dedicated(t, replica)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := &RedisReplication{Master: master, Replica: replica, Link: link}
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatalf("servers: replica %s of %s: %v", replica.Name(), master.Name(), err)
	}
	return r
}

// redisReplicaKind is a Redis server started as a replica of host:port.
type redisReplicaKind struct {
	redisKind
	host, port string
}

func (k redisReplicaKind) command(s *Server) (*exec.Cmd, error) {
	cmd, err := k.redisKind.command(s)
	if err != nil {
		return nil, err
	}
	cmd.Args = append(cmd.Args, "--replicaof", k.host, k.port)
	return cmd, nil
}

// WaitSynced waits until the replica's link to the master is up and it has
// applied everything the master had written when WaitSynced was called,
// and the master counts it as an online replica at that offset (so WAIT
// counts it at once). It polls INFO replication on both until then, or
// until ctx ends.
func (r *RedisReplication) WaitSynced(ctx context.Context) error {
	master := newRedisClient(r.Master.Addr())
	defer master.Close()
	replica := newRedisClient(r.Replica.Addr())
	defer replica.Close()
	var want int64 = -1
	var last string
	for {
		err := r.synced(ctx, master, replica, &want)
		if err == nil {
			return nil
		}
		last = err.Error()
		select {
		case <-ctx.Done():
			return fmt.Errorf("not in sync (%s): %w", last, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// synced checks once; *want is the master's offset, read on the first call
// that reaches it.
func (r *RedisReplication) synced(ctx context.Context, master, replica *redis.Client, want *int64) error {
	if *want < 0 {
		info, err := master.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("master: %w", err)
		}
		*want, _ = strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
	}
	info, err := replica.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	if st := infoField(info, "master_link_status"); st != "up" {
		return fmt.Errorf("replica: link %s", st)
	}
	if got, _ := strconv.ParseInt(infoField(info, "slave_repl_offset"), 10, 64); got < *want {
		return fmt.Errorf("replica at offset %d of %d", got, *want)
	}
	info, err = master.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("master: %w", err)
	}
	// slave0:ip=127.0.0.1,port=P,state=online,offset=N,lag=0
	fields := map[string]string{}
	for _, kv := range strings.Split(infoField(info, "slave0"), ",") {
		k, v, _ := strings.Cut(kv, "=")
		fields[k] = v
	}
	if fields["state"] != "online" {
		return fmt.Errorf("master: replica state %q", fields["state"])
	}
	if got, _ := strconv.ParseInt(fields["offset"], 10, 64); got < *want {
		return fmt.Errorf("master: replica acknowledged offset %d of %d", got, *want)
	}
	return nil
}

// Promote makes the replica a master (REPLICAOF NO ONE), as Sentinel or an
// operator does in a failover. It keeps its data and accepts writes from
// then on; the old master carries on as a master too, as after a failover
// it was not told of.
func (r *RedisReplication) Promote(ctx context.Context) error {
	c := newRedisClient(r.Replica.Addr())
	defer c.Close()
	if err := c.Do(ctx, "replicaof", "no", "one").Err(); err != nil {
		return fmt.Errorf("servers: promoting %s: %w", r.Replica.Name(), err)
	}
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("servers: promoting %s: %w", r.Replica.Name(), err)
	}
	if role := infoField(info, "role"); role != "master" {
		return fmt.Errorf("servers: promoting %s: role %q after REPLICAOF NO ONE", r.Replica.Name(), strings.TrimSpace(role))
	}
	return nil
}
