package redisserver

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// Replication is a Redis master and a replica the harness started for
// it, to read the master's data with replication lag and to fail over to.
type Replication struct {
	// Master is the server replicated, as given to NewReplica.
	Master *harness.Server
	// Replica is the replica's process, with the usual faults. A restart
	// (Start) makes it a replica of Master again, Promote notwithstanding:
	// --replicaof is on its command line.
	Replica *harness.Server
	// Link is the proxy the replica reaches its master through: Cut it to
	// partition the replica from the master (it notices at once), Delay it
	// to make the replica lag by that much, Blackhole it to stall
	// replication silently (the replica gives up on the master only after
	// repl-timeout, 60 s). Clients of the replica do not go through it.
	Link *harness.Proxy
}

// NewReplica starts a replica of master (a Redis server from NewRedis
// or NewRedisN) for the calling test alone, connected to master through a
// [harness.Proxy] (Link), and returns once the initial sync is done. It is torn down
// when the test ends. The replica is read-only, as Redis replicas are by
// default.
func NewReplica(t testing.TB, master *harness.Server) *Replication {
	t.Helper()
	harness.RequireMain(t)
	if _, ok := master.Kind().(kind); !ok {
		t.Fatalf("redisserver: NewReplica: %s is not a Redis server from New", master.Name())
	}
	link := harness.NewProxy(t, master.Addr())
	s, err := harness.Launch(replicaKind{kind: kind{bin: binary()}, master: link.Addr()}, "redis-replica", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, s)
	r := &Replication{Master: master, Replica: s, Link: link}
	ctx, cancel := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancel()
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatalf("redisserver: %s: initial sync from %s: %v", s.Name(), master.Name(), err)
	}
	return r
}

// replicaKind is a Redis server started with --replicaof.
type replicaKind struct {
	kind
	master string // host:port, the Link's address
}

func (k replicaKind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd, err := k.kind.Command(s)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(k.master)
	if err != nil {
		return nil, err
	}
	cmd.Args = append(cmd.Args, "--replicaof", host, port)
	return cmd, nil
}

// WaitSynced waits until the replica is connected to its master and has
// applied everything the master had written when WaitSynced was called.
func (r *Replication) WaitSynced(ctx context.Context) error {
	target, err := redisInfoField(ctx, r.Master.Addr(), "replication", "master_repl_offset")
	if err != nil {
		return fmt.Errorf("redisserver: %s: %w", r.Master.Name(), err)
	}
	want, _ := strconv.ParseInt(target, 10, 64)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		info, err := redisInfo(ctx, r.Replica.Addr(), "replication")
		if err == nil {
			got, _ := strconv.ParseInt(info["slave_repl_offset"], 10, 64)
			switch {
			case info["master_link_status"] != "up":
				err = fmt.Errorf("master_link_status %q", info["master_link_status"])
			case got < want:
				err = fmt.Errorf("replica at offset %d, master was at %d", got, want)
			default:
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: %s not in sync: %v: %w", r.Replica.Name(), last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Promote makes the replica a master (REPLICAOF NO ONE), as Sentinel or an
// operator does in a failover: it keeps the data it had and accepts writes
// from then on. The old master carries on as a master too, as after a
// failover it was not told of; the Link is left alone.
func (r *Replication) Promote(ctx context.Context) error {
	c := client(r.Replica.Addr())
	defer c.Close()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("redisserver: promoting %s: %w", r.Replica.Name(), err)
	}
	s, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("redisserver: promoting %s: %w", r.Replica.Name(), err)
	}
	if role := parseInfo(s)["role"]; role != "master" {
		return fmt.Errorf("redisserver: promoting %s: role %q after REPLICAOF NO ONE", r.Replica.Name(), role)
	}
	return nil
}
