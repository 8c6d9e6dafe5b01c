package servers

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/internal/servers/internal/resp"
)

// RedisReplication is a Redis master and a replica the harness started for
// it, to read the master's data with replication lag and to fail over to.
type RedisReplication struct {
	// Master is the server replicated, as given to NewRedisReplica.
	Master *Server
	// Replica is the replica's process, with the usual faults. A restart
	// (Start) makes it a replica of Master again, Promote notwithstanding:
	// --replicaof is on its command line.
	Replica *Server
	// Link is the proxy the replica reaches its master through: Cut it to
	// partition the replica from the master (it notices at once), Delay it
	// to make the replica lag by that much, Blackhole it to stall
	// replication silently (the replica gives up on the master only after
	// repl-timeout, 60 s). Clients of the replica do not go through it.
	Link *Proxy
}

// NewRedisReplica starts a replica of master (a Redis server from NewRedis
// or NewRedisN) for the calling test alone, connected to master through a
// [Proxy] (Link), and returns once the initial sync is done. It is torn down
// when the test ends. The replica is read-only, as Redis replicas are by
// default.
func NewRedisReplica(t testing.TB, master *Server) *RedisReplication {
	t.Helper()
	requireMain(t)
	if _, ok := master.kind.(redisKind); !ok {
		t.Fatalf("servers: NewRedisReplica: %s is not a Redis server from NewRedis", master.Name())
	}
	if redisBinary() == "" {
		unavailable(t, noBinaryMsg("NewRedisReplica", "redis-server", "redis-server"))
	}
	link := NewProxy(t, master.Addr())
	s, err := launch(redisReplicaKind{redisKind: redisKind{bin: redisBinary()}, master: link.Addr()}, "redis-replica", 1)
	if err != nil {
		t.Fatal(err)
	}
	dedicated(t, s)
	r := &RedisReplication{Master: master, Replica: s, Link: link}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatalf("servers: %s: initial sync from %s: %v", s.Name(), master.Name(), err)
	}
	return r
}

// redisReplicaKind is a Redis server started with --replicaof.
type redisReplicaKind struct {
	redisKind
	master string // host:port, the Link's address
}

func (k redisReplicaKind) command(s *Server) (*exec.Cmd, error) {
	cmd, err := k.redisKind.command(s)
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
func (r *RedisReplication) WaitSynced(ctx context.Context) error {
	target, err := redisInfoField(ctx, r.Master.Addr(), "replication", "master_repl_offset")
	if err != nil {
		return fmt.Errorf("servers: %s: %w", r.Master.Name(), err)
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
			return fmt.Errorf("servers: %s not in sync: %v: %w", r.Replica.Name(), last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Promote makes the replica a master (REPLICAOF NO ONE), as Sentinel or an
// operator does in a failover: it keeps the data it had and accepts writes
// from then on. The old master carries on as a master too, as after a
// failover it was not told of; the Link is left alone.
func (r *RedisReplication) Promote(ctx context.Context) error {
	c, err := resp.Dial(ctx, r.Replica.Addr())
	if err != nil {
		return fmt.Errorf("servers: promoting %s: %w", r.Replica.Name(), err)
	}
	defer c.Close()
	if _, err := c.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("servers: promoting %s: %w", r.Replica.Name(), err)
	}
	info, err := c.Info(ctx, "replication")
	if err != nil {
		return fmt.Errorf("servers: promoting %s: %w", r.Replica.Name(), err)
	}
	if role := info["role"]; role != "master" {
		return fmt.Errorf("servers: promoting %s: role %q after REPLICAOF NO ONE", r.Replica.Name(), role)
	}
	return nil
}

func redisInfo(ctx context.Context, addr, section string) (map[string]string, error) {
	c, err := resp.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Info(ctx, section)
}

func redisInfoField(ctx context.Context, addr, section, field string) (string, error) {
	info, err := redisInfo(ctx, addr, section)
	if err != nil {
		return "", err
	}
	v, ok := info[field]
	if !ok {
		return "", fmt.Errorf("INFO %s has no %s", section, field)
	}
	return v, nil
}
