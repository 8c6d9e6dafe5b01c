package redisserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// Sentinel timing of a [Sentinel]: a primary that does not answer for
// SentinelDownAfter is subjectively down; a failover that has not finished
// within SentinelFailoverTimeout is abandoned (and a sentinel that lost an
// election waits twice that before it tries again).
const (
	SentinelDownAfter       = time.Second
	SentinelFailoverTimeout = 3 * time.Second
)

// Sentinel is a Redis primary, one replica and three Sentinels
// monitoring them (quorum 2), all started for one test. Clients find the
// primary through the sentinels: go-redis's NewFailoverClient with
// MasterName and SentinelAddrs.
//
// Nodes are the two data servers: Nodes[0] starts as the primary, Nodes[1]
// as its replica; after a failover the roles are swapped, so ask
// [Sentinel.Primary] and [Sentinel.Replica]. Each node keeps its
// configuration in a file that Sentinel rewrites (CONFIG REWRITE), so a
// restarted node comes back in the role Sentinel last gave it; a restarted
// old primary that missed the failover comes back as a primary and the
// sentinels demote it within a few seconds.
type Sentinel struct {
	Nodes     []*harness.Server
	Sentinels []*harness.Server
	name      string
}

// NewSentinel starts a primary, a replica of it and three sentinels for
// the calling test alone, and returns once the replica is in sync and every
// sentinel knows the replica and the two other sentinels. It is torn down
// (SIGKILL) when the test ends.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	harness.RequireMain(t)
	bin := binary()
	if bin == "" {
		harness.SkipOrFail(t, harness.NoBinaryMessage("redisserver.NewSentinel", "redis-server", "redis-server"))
	}
	r := &Sentinel{name: "fg-" + harness.UniqueID()}
	primary, err := harness.Launch(&nodeKind{bin: bin}, "redis-primary", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, primary)
	replica, err := harness.Launch(&nodeKind{bin: bin, replicaOf: primary.Addr()}, "redis-replica", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, replica)
	r.Nodes = []*harness.Server{primary, replica}
	for range 3 {
		s, err := harness.Launch(&sentinelKind{bin: bin, name: r.name, master: primary.Addr()}, "redis-sentinel", 1)
		if err != nil {
			t.Fatal(err)
		}
		harness.Cleanup(t, s)
		r.Sentinels = append(r.Sentinels, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancel()
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.waitSentinelsKnowAll(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// MasterName is the name the sentinels monitor the primary under.
func (r *Sentinel) MasterName() string { return r.name }

// SentinelAddrs returns the sentinels' addresses.
func (r *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(r.Sentinels))
	for i, s := range r.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// Primary returns the node every running sentinel reports as the primary
// (SENTINEL GET-MASTER-ADDR-BY-NAME), waiting while they disagree.
func (r *Sentinel) Primary(ctx context.Context) (*harness.Server, error) {
	return r.waitPrimary(ctx, nil)
}

// Replica returns the node that is not the primary.
func (r *Sentinel) Replica(ctx context.Context) (*harness.Server, error) {
	p, err := r.Primary(ctx)
	if err != nil {
		return nil, err
	}
	return r.other(p), nil
}

func (r *Sentinel) other(s *harness.Server) *harness.Server {
	if s == r.Nodes[0] {
		return r.Nodes[1]
	}
	return r.Nodes[0]
}

// waitPrimary waits until every running sentinel reports the same node as
// primary, not old, and that node says it is a master.
func (r *Sentinel) waitPrimary(ctx context.Context, old *harness.Server) (*harness.Server, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		p, err := r.reportedPrimary(ctx)
		if err == nil && p == old {
			err = fmt.Errorf("sentinels still report %s", old.Name())
		}
		if err == nil {
			var role string
			if role, err = redisInfoField(ctx, p.Addr(), "replication", "role"); err == nil && role != "master" {
				err = fmt.Errorf("sentinels report %s, whose role is %s", p.Name(), role)
			}
		}
		if err == nil {
			return p, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("redisserver: sentinel %s: no agreed primary: %v: %w", r.name, last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// reportedPrimary asks every running sentinel once.
func (r *Sentinel) reportedPrimary(ctx context.Context) (*harness.Server, error) {
	var addr string
	asked := 0
	for _, s := range r.Sentinels {
		if !s.Running() {
			continue
		}
		a, err := r.askPrimary(ctx, s)
		if err != nil {
			return nil, err
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("sentinels disagree: %s and %s", addr, a)
		}
		addr = a
		asked++
	}
	if asked == 0 {
		return nil, errors.New("no sentinel running")
	}
	for _, n := range r.Nodes {
		if n.Addr() == addr {
			return n, nil
		}
	}
	return nil, fmt.Errorf("sentinels report %s, not one of the nodes", addr)
}

func (r *Sentinel) askPrimary(ctx context.Context, s *harness.Server) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := do(qctx, s.Addr(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", r.name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.Name(), err)
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("%s: GET-MASTER-ADDR-BY-NAME replied %v", s.Name(), v)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	return host + ":" + port, nil
}

// sentinelMaster returns SENTINEL MASTER's fields as one sentinel sees them.
func (r *Sentinel) sentinelMaster(ctx context.Context, s *harness.Server) (map[string]string, error) {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := do(qctx, s.Addr(), "SENTINEL", "MASTER", r.name)
	if err != nil {
		return nil, err
	}
	kv, _ := v.([]any)
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		val, _ := kv[i+1].(string)
		out[k] = val
	}
	return out, nil
}

// waitSentinelsKnowAll waits until every running sentinel sees the primary
// up, one replica and the other running sentinels.
func (r *Sentinel) waitSentinelsKnowAll(ctx context.Context) error {
	running := 0
	for _, s := range r.Sentinels {
		if s.Running() {
			running++
		}
	}
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		last = nil
		for _, s := range r.Sentinels {
			if !s.Running() {
				continue
			}
			m, err := r.sentinelMaster(ctx, s)
			switch {
			case err != nil:
			case m["flags"] != "master":
				err = fmt.Errorf("flags %q", m["flags"])
			case m["num-slaves"] != "1":
				err = fmt.Errorf("num-slaves %s", m["num-slaves"])
			case m["num-other-sentinels"] != strconv.Itoa(running-1):
				err = fmt.Errorf("num-other-sentinels %s", m["num-other-sentinels"])
			}
			if err != nil {
				last = fmt.Errorf("%s: %w", s.Name(), err)
				break
			}
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: sentinel %s not ready: %v: %w", r.name, last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// WaitSynced waits until the replica is connected to the primary and has
// applied everything the primary had written when WaitSynced was called,
// and the sentinels know them both. After a failover the old primary (left
// running, or restarted) still calls itself a primary until a sentinel
// looks at it, up to 10 s later (Sentinel's INFO period), and demotes it;
// WaitSynced does that at once (REPLICAOF the primary, CONFIG REWRITE), as
// the sentinel would.
func (r *Sentinel) WaitSynced(ctx context.Context) error {
	p, err := r.Primary(ctx)
	if err != nil {
		return err
	}
	rep := r.other(p)
	if err := r.demote(ctx, rep, p); err != nil {
		return err
	}
	target, err := redisInfoField(ctx, p.Addr(), "replication", "master_repl_offset")
	if err != nil {
		return fmt.Errorf("redisserver: %s: %w", p.Name(), err)
	}
	want, _ := strconv.ParseInt(target, 10, 64)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var last error
	for {
		info, err := redisInfo(ctx, rep.Addr(), "replication")
		if err == nil {
			got, _ := strconv.ParseInt(info["slave_repl_offset"], 10, 64)
			switch {
			case info["role"] != "slave" || info["master_port"] != strconv.Itoa(p.Port()):
				err = fmt.Errorf("role %s of port %s", info["role"], info["master_port"])
			case info["master_link_status"] != "up":
				err = fmt.Errorf("master_link_status %q", info["master_link_status"])
			case got < want:
				err = fmt.Errorf("replica at offset %d, primary was at %d", got, want)
			}
		}
		if err == nil {
			return r.waitSentinelsKnowAll(ctx)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: %s not in sync with %s: %v: %w", rep.Name(), p.Name(), last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// demote makes s a replica of p if it calls itself a primary.
func (r *Sentinel) demote(ctx context.Context, s, p *harness.Server) error {
	if !s.Running() {
		return fmt.Errorf("redisserver: %s, the replica, is not running", s.Name())
	}
	c := client(s.Addr())
	defer c.Close()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for { // it may be starting
		err := c.Ping(ctx).Err()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redisserver: %s: %w", s.Name(), err)
		case <-tick.C:
		}
	}
	is, err := c.Info(ctx, "replication").Result()
	if err != nil || parseInfo(is)["role"] != "master" {
		return nil // a replica already, or loading: the wait below tells
	}
	if err := c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(p.Port())).Err(); err != nil {
		return fmt.Errorf("redisserver: demoting %s: %w", s.Name(), err)
	}
	if err := c.Do(ctx, "CONFIG", "REWRITE").Err(); err != nil {
		return fmt.Errorf("redisserver: demoting %s: %w", s.Name(), err)
	}
	return nil
}

// Failover asks a sentinel for a failover (SENTINEL FAILOVER, which needs
// no agreement) and waits until every running sentinel reports the replica
// as the new primary; it returns that. It does not wait for the old primary
// to become a replica (WaitSynced does).
func (r *Sentinel) Failover(ctx context.Context) (*harness.Server, error) {
	old, err := r.Primary(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.forceFailover(ctx); err != nil {
		return nil, err
	}
	return r.waitPrimary(ctx, old)
}

func (r *Sentinel) forceFailover(ctx context.Context) error {
	var errs []error
	for _, s := range r.Sentinels {
		if !s.Running() {
			continue
		}
		_, err := do(ctx, s.Addr(), "SENTINEL", "FAILOVER", r.name)
		if err == nil {
			return nil
		}
		// INPROG: another sentinel's failover is under way, as good.
		if strings.Contains(err.Error(), "INPROG") {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.Name(), err))
	}
	return fmt.Errorf("redisserver: SENTINEL FAILOVER %s: %w", r.name, errors.Join(errs...))
}

// KillPrimary kills the primary (SIGKILL) and waits until the sentinels
// have failed over to the replica on their own (down after
// SentinelDownAfter, a quorum, an election): it returns the killed server
// and the new primary. Start the killed one again to get a replica back
// (the sentinels demote it), then WaitSynced.
func (r *Sentinel) KillPrimary(ctx context.Context) (killed, promoted *harness.Server, err error) {
	old, err := r.Primary(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := old.Kill(); err != nil {
		return nil, nil, err
	}
	p, err := r.waitPrimary(ctx, old)
	return old, p, err
}

// StallReplication makes the replica stop replicating while the sentinels
// still count it as a replica they may promote: it is pointed at a port no
// one listens on (REPLICAOF), keeps its data and takes nothing the primary
// writes from then on. A failover now loses those writes, as one to a
// lagging replica does. If no failover comes, the sentinels point the
// replica back at the primary after SentinelFailoverTimeout
// (+fix-slave-config); WaitSynced waits for that.
func (r *Sentinel) StallReplication(ctx context.Context) error {
	rep, err := r.Replica(ctx)
	if err != nil {
		return err
	}
	dead, err := harness.FreePorts(1)
	if err != nil {
		return err
	}
	if _, err := do(ctx, rep.Addr(), "REPLICAOF", "127.0.0.1", strconv.Itoa(dead[0])); err != nil {
		return fmt.Errorf("redisserver: stalling %s: %w", rep.Name(), err)
	}
	return nil
}

// nodeKind is a Redis data node of a Sentinel setup. Its configuration
// lives in a file written at the first start only: Sentinel rewrites it
// (replicaof) and a restart must keep what Sentinel set.
type nodeKind struct {
	bin       string
	replicaOf string // host:port at the first start; empty for a primary
}

func (k *nodeKind) confPath(s *harness.Server) string { return filepath.Join(s.Dir(), "redis.conf") }

func (k *nodeKind) Prepare(ctx context.Context, s *harness.Server) error {
	if err := os.MkdirAll(s.DataDir(), 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(k.confPath(s)); err == nil {
		return nil
	}
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\ndaemonize no\nsave \"\"\nappendonly yes\nappendfsync everysec\nrepl-diskless-sync-delay 0\n",
		s.Port(), s.DataDir())
	if k.replicaOf != "" {
		host, port, _ := strings.Cut(k.replicaOf, ":")
		conf += fmt.Sprintf("replicaof %s %s\n", host, port)
	}
	return os.WriteFile(k.confPath(s), []byte(conf), 0o644)
}

func (k *nodeKind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd := exec.Command(k.bin, k.confPath(s))
	cmd.Dir = s.Dir()
	return cmd, nil
}

func (*nodeKind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	return probe(ctx, s.Addr(), pid)
}
func (*nodeKind) StopSignal() syscall.Signal { return syscall.SIGTERM }
func (*nodeKind) GracefulTeardown() bool     { return false }
func (*nodeKind) CanWipe(*harness.Server) error {
	return errors.New("redisserver: a Sentinel node keeps its configuration with its data; it cannot be wiped")
}

// sentinelKind is a Redis Sentinel (redis-server sentinel.conf --sentinel).
// Sentinel rewrites its file with what it learnt (the current primary, the
// replica, the other sentinels, the epoch): it is written at the first
// start only, so a restarted sentinel resumes.
type sentinelKind struct {
	bin    string
	name   string
	master string // host:port of the primary at the first start
}

func (k *sentinelKind) confPath(s *harness.Server) string {
	return filepath.Join(s.Dir(), "sentinel.conf")
}

func (k *sentinelKind) Prepare(ctx context.Context, s *harness.Server) error {
	if err := os.MkdirAll(s.DataDir(), 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(k.confPath(s)); err == nil {
		return nil
	}
	host, port, _ := strings.Cut(k.master, ":")
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
daemonize no
sentinel monitor %s %s %s 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, s.Port(), s.DataDir(), k.name, host, port, k.name, SentinelDownAfter.Milliseconds(), k.name, SentinelFailoverTimeout.Milliseconds(), k.name)
	return os.WriteFile(k.confPath(s), []byte(conf), 0o644)
}

func (k *sentinelKind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd := exec.Command(k.bin, k.confPath(s), "--sentinel")
	cmd.Dir = s.Dir()
	return cmd, nil
}

func (*sentinelKind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	return probe(ctx, s.Addr(), pid)
}
func (*sentinelKind) StopSignal() syscall.Signal { return syscall.SIGTERM }
func (*sentinelKind) GracefulTeardown() bool     { return false }
func (*sentinelKind) CanWipe(*harness.Server) error {
	return errors.New("redisserver: a sentinel cannot be wiped")
}
