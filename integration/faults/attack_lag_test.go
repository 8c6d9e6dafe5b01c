package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/locks/zklock"
	"github.com/fenceguard/fenceguard/token"
)

// The fence stores' replication: a mark read from a member that has not
// applied the latest claim yet. Each attack claims T, then T+1 through
// another member (acknowledged), then T again where the stale copy is; the
// fenced side must refuse it, the control — the old "read, and accept an
// equal mark without writing" — is seen to accept it.

func init() {
	registerAttack(attack{
		Name: "lag/zk",
		About: "3-member ZooKeeper: claim T through a follower's session, T+1 through the leader's, T again through the follower; " +
			"faults are rounds whose follower read was stale. Control: the old fence (plain Get on the same follower session, equal accepted without a write)",
		Rounds: 4000, // at most: the attack stops once the control bit lagControlWanted times (or at its budget)
		Short:  1000,
		Run:    attackLagZK,
	})
	registerAttack(attack{
		Name: "lag/etcd",
		About: "3-member etcd: claim T through a follower's client, freeze the follower (SIGSTOP), T+1 through the leader's, thaw it with T claimed through it; " +
			"faults are stale serializable reads on the follower. Control: a fence that reads serializably there and accepts an equal mark without a write",
		Rounds: 40,
		Short:  15,
		Run:    attackLagEtcd,
	})
	registerAttack(attack{
		Name: "lag/redis",
		About: "master + replica, replication delayed 400 ms: T+1 claimed with Replicas: 1 (WAIT), T claimed through the replica, the master lost (link cut, SIGKILL), the replica promoted, T claimed on it; " +
			"faults are rounds whose promoted replica had missed the control's T+1. Control: Replicas: 0, and the old script (equal accepted without a write) on the replica",
		Rounds: 10,
		Short:  3,
		Run:    attackLagRedis,
	})
}

const (
	lagControlWanted = 5                // control bites after which a probabilistic attack may stop
	lagMinRounds     = 200              // …but not before these rounds
	lagBudget        = 25 * time.Second // the rounds of one probabilistic attack, at most
)

// lagCtx is a context for an attack's whole run.
func lagCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ---- lag/zk ----

// lagZKConn is a connection to one member; it remembers whether the last
// read of the watched path answered something other than want.
type lagZKConn struct {
	*zk.Conn
	path  atomic.Pointer[string]
	want  atomic.Pointer[string]
	stale atomic.Bool
}

func (c *lagZKConn) Get(path string) ([]byte, *zk.Stat, error) {
	data, st, err := c.Conn.Get(path)
	if p, w := c.path.Load(), c.want.Load(); p != nil && w != nil && *p == path && err == nil && string(data) != *w {
		c.stale.Store(true)
	}
	return data, st, err
}

func (c *lagZKConn) watch(path, want string) {
	c.stale.Store(false)
	c.path.Store(&path)
	c.want.Store(&want)
}

func (c *lagZKConn) unwatch() bool {
	c.path.Store(nil)
	c.want.Store(nil)
	return c.stale.Load()
}

// lagZKConnect connects to the one member at addr and waits for a session.
func lagZKConnect(t *testing.T, addr string) *lagZKConn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(zkLogger{quietLog}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("connecting to ZooKeeper at %s: %v", addr, err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events { // until go-zookeeper's goroutines are done
		}
	})
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-timeout.C:
			t.Fatalf("no ZooKeeper session with %s after a minute", addr)
		}
	}
	return &lagZKConn{Conn: c}
}

// lagZKNaive is the fence before the fix: a plain Get on the session's
// member, and a token equal to the mark accepted on that read alone. It
// reports whether it accepted t (and writes nothing: the cases it is used
// for are equal or lower ones).
func lagZKNaive(c *lagZKConn, path string, t token.Token) (bool, error) {
	data, _, err := c.Get(path)
	if err != nil {
		return false, err
	}
	return string(data) == t.String(), nil
}

func attackLagZK(t *testing.T, s *attackStats) {
	e := zkserver.NewEnsemble(t, 3)
	ctx := lagCtx(t, 2*time.Minute)
	leader, followers, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "/fg-lag"
	opts := zklock.FenceOptions{Prefix: prefix, Check: token.NoCheck(), Logger: quietLog}
	onLeader := zklock.NewFence(lagZKConnect(t, leader.Addr()), opts)
	var conns []*lagZKConn
	var onFollower []*zklock.Fence
	for _, f := range followers {
		c := lagZKConnect(t, f.Addr())
		conns = append(conns, c)
		onFollower = append(onFollower, zklock.NewFence(c, opts))
	}
	const lo, hi token.Token = 5, 6
	start := time.Now()
	for round := 0; round < s.Rounds(); round++ {
		if time.Since(start) > lagBudget {
			break
		}
		if s.Control >= lagControlWanted && round >= lagMinRounds { // only this goroutine writes s
			break
		}
		i := round % len(conns)
		c, fenced := conns[i], onFollower[i]
		r := fmt.Sprint("r", round)
		path := prefix + "/" + r
		if err := fenced.Claim(ctx, r, lo); err != nil {
			t.Fatalf("round %d: claim %d through %s: %v", round, lo, followers[i].Name(), err)
		}
		if err := onLeader.Claim(ctx, r, hi); err != nil {
			if errors.Is(err, token.ErrStale) {
				s.Add(func(s *attackStats) { s.Lockouts++ })
				continue
			}
			t.Fatalf("round %d: claim %d through the leader: %v", round, hi, err)
		}
		// Both read right after the leader's acknowledgement, in turns,
		// so that neither gets the fresher read every time.
		var naiveOK, naiveStale, fencedStale bool
		var fencedErr error
		naive := func() {
			c.watch(path, hi.String())
			ok, err := lagZKNaive(c, path, lo)
			naiveStale = c.unwatch()
			if err != nil {
				t.Fatalf("round %d: the control's read through %s: %v", round, followers[i].Name(), err)
			}
			naiveOK = ok
		}
		claim := func() {
			c.watch(path, hi.String())
			fencedErr = fenced.Claim(ctx, r, lo)
			fencedStale = c.unwatch()
		}
		if round%2 == 0 {
			naive()
			claim()
		} else {
			claim()
			naive()
		}
		var se *token.StaleError
		if fencedErr != nil && !errors.As(fencedErr, &se) {
			t.Fatalf("round %d: claim %d again through %s: %v", round, lo, followers[i].Name(), fencedErr)
		}
		// The holder of T+1 goes on through the follower: its equal
		// token must be accepted, however stale the follower's copy.
		honest := fenced.Claim(ctx, r, hi)
		if honest != nil && !errors.Is(honest, token.ErrStale) {
			t.Fatalf("round %d: claim %d (equal) through %s: %v", round, hi, followers[i].Name(), honest)
		}
		s.Add(func(s *attackStats) {
			s.Runs++
			if naiveStale || fencedStale {
				s.Faults++
			}
			s.Attempts++
			if fencedErr == nil {
				s.Accepted++
			} else {
				s.Refused++
			}
			if honest != nil {
				s.Lockouts++
			}
			if naiveOK {
				s.Control++
			}
		})
	}
}

// ---- lag/etcd ----

func attackLagEtcd(t *testing.T, s *attackStats) {
	cl := etcdserver.NewCluster(t, 3)
	ctx := lagCtx(t, 3*time.Minute)
	leader, err := cl.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *harness.Server
	for _, m := range cl.Members {
		if m != leader {
			follower = m
			break
		}
	}
	client := func(addr string) *clientv3.Client {
		cli, err := clientv3.New(etcdConfig([]string{addr}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	cliL, cliF := client(leader.Addr()), client(follower.Addr())
	const prefix = "/fg-lag/"
	opts := etcdlock.FenceOptions{Prefix: prefix, Check: token.NoCheck(), Logger: quietLog}
	onLeader, onFollower := etcdlock.NewFence(cliL, opts), etcdlock.NewFence(cliF, opts)
	pad := func(t token.Token) string { return fmt.Sprintf("%020d", uint64(t)) } // the Fence's encoding
	// The control: the "equal needs no write, so trust the read" fence,
	// with the read served by the member the client talks to.
	naive := func(ctx context.Context, key string, t token.Token) (accepted, stale bool, err error) {
		resp, err := cliF.Get(ctx, key, clientv3.WithSerializable())
		if err != nil {
			return false, false, err
		}
		if len(resp.Kvs) == 0 {
			return false, true, nil
		}
		v := string(resp.Kvs[0].Value)
		return v == pad(t), v != pad(t+1), nil
	}
	defer func() {
		if follower.PID() != 0 {
			follower.Resume() // in case a round failed while it was frozen
		}
	}()
	const lo, hi token.Token = 5, 6
	for round := 0; round < s.Rounds(); round++ {
		r := fmt.Sprint("r", round)
		if err := onFollower.Claim(ctx, r, lo); err != nil {
			t.Fatalf("round %d: claim %d through %s: %v", round, lo, follower.Name(), err)
		}
		// Wait until the follower itself serves lo, so that the round
		// starts with its copy current.
		for {
			resp, err := cliF.Get(ctx, prefix+r, clientv3.WithSerializable())
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == pad(lo) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := follower.Pause(); err != nil {
			t.Fatal(err)
		}
		claimed := onLeader.Claim(ctx, r, hi) // a quorum without the follower
		// Both the control's read and the fenced claim are sent to the
		// frozen follower; it answers them once thawed, while it catches
		// up on the leader's log.
		type naiveResult struct {
			ok, stale bool
			err       error
		}
		nres, fres := make(chan naiveResult, 1), make(chan error, 1)
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		go func() {
			ok, stale, err := naive(rctx, prefix+r, lo)
			nres <- naiveResult{ok, stale, err}
		}()
		go func() { fres <- onFollower.Claim(rctx, r, lo) }()
		time.Sleep(100 * time.Millisecond) // both requests are in the follower's sockets
		if err := follower.Resume(); err != nil {
			cancel()
			t.Fatal(err)
		}
		n, fencedErr := <-nres, <-fres
		cancel()
		if claimed != nil {
			t.Fatalf("round %d: claim %d through the leader: %v", round, hi, claimed)
		}
		if n.err != nil {
			t.Fatalf("round %d: the control's read through %s: %v", round, follower.Name(), n.err)
		}
		var se *token.StaleError
		if fencedErr != nil && !errors.As(fencedErr, &se) {
			t.Fatalf("round %d: claim %d again through %s: %v", round, lo, follower.Name(), fencedErr)
		}
		honest := onFollower.Claim(ctx, r, hi)
		if honest != nil && !errors.Is(honest, token.ErrStale) {
			t.Fatalf("round %d: claim %d (equal) through %s: %v", round, hi, follower.Name(), honest)
		}
		s.Add(func(s *attackStats) {
			s.Runs++
			if n.stale {
				s.Faults++
			}
			s.Attempts++
			if fencedErr == nil {
				s.Accepted++
			} else {
				s.Refused++
			}
			if honest != nil {
				s.Lockouts++
			}
			if n.ok {
				s.Control++
			}
		})
	}
}

// ---- lag/redis ----

// lagRedisOldClaim is redislock's Fence script before the fix: a token
// equal to the mark is accepted without a write, so a replica's script —
// which fails only when it tries to write — accepts it from its copy.
var lagRedisOldClaim = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and (#cur > #ARGV[1] or (#cur == #ARGV[1] and cur > ARGV[1])) then
  return {0, cur}
end
if cur ~= ARGV[1] then redis.call('SET', KEYS[1], ARGV[1]) end
return {1}
`)

func attackLagRedis(t *testing.T, s *attackStats) {
	master := redisserver.New(t)
	rep := redisserver.NewReplica(t, master)
	ctx := lagCtx(t, 3*time.Minute)
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
		t.Cleanup(func() { c.Close() })
		return c
	}
	cm, cr := client(master.Addr()), client(rep.Replica.Addr())
	const prefix = "fg-lag:"
	const delay = 400 * time.Millisecond
	fo := func(replicas int) redislock.FenceOptions {
		return redislock.FenceOptions{Prefix: prefix, Check: token.NoCheck(), Logger: quietLog, Replicas: replicas, ReplicaTimeout: 3 * time.Second}
	}
	fenced, control := redislock.NewFence(cm, fo(1)), redislock.NewFence(cm, fo(0))
	throughReplica := redislock.NewFence(cr, fo(1))
	promoted := redislock.NewFence(cr, fo(0)) // the replica once promoted: no replica of its own
	key := func(r string) string { return prefix + "{" + r + "}" }
	linkHost, linkPort, err := net.SplitHostPort(rep.Link.Addr())
	if err != nil {
		t.Fatal(err)
	}
	const lo, hi token.Token = 5, 6
	for round := 0; round < s.Rounds(); round++ {
		a, b := fmt.Sprint("fenced", round), fmt.Sprint("control", round)
		if err := fenced.Claim(ctx, a, lo); err != nil {
			t.Fatalf("round %d: fenced claim %d: %v", round, lo, err)
		}
		if err := control.Claim(ctx, b, lo); err != nil {
			t.Fatalf("round %d: control claim %d: %v", round, lo, err)
		}
		if err := rep.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rep.Link.Delay(delay); err != nil {
			t.Fatal(err)
		}
		// T+1, acknowledged: the fenced claim once the replica has it
		// (WAIT 1), the control's at once. The control's goes second: the
		// replication stream is ordered, so the other way round the
		// fenced claim's WAIT would carry the control's claim over too.
		if err := fenced.Claim(ctx, a, hi); err != nil {
			if errors.Is(err, token.ErrStale) {
				s.Add(func(s *attackStats) { s.Lockouts++ })
			}
			t.Fatalf("round %d: fenced claim %d with WAIT 1 over a %v link: %v", round, hi, delay, err)
		}
		if err := control.Claim(ctx, b, hi); err != nil {
			t.Fatalf("round %d: control claim %d: %v", round, hi, err)
		}
		// A Fence pointed at the replica fails closed (READONLY, or WAIT's
		// refusal on a replica), on the fenced key and on the control's,
		// whose copy there still holds T; the old script, on the control's
		// key, accepts the stale token from that copy.
		var viaReplica []error
		for _, r := range []string{a, b} {
			viaReplica = append(viaReplica, throughReplica.Claim(ctx, r, lo))
		}
		if err := viaReplica[1]; err != nil && !lagIsReadOnly(err) {
			t.Errorf("round %d: claim %d through the replica, whose copy holds it: %v, want READONLY", round, lo, err)
		}
		oldOnReplica, err := lagRedisOldClaim.Run(ctx, cr, []string{key(b)}, lo.String()).Slice()
		if err != nil && !lagIsReadOnly(err) {
			t.Fatalf("round %d: the old script on the replica: %v", round, err)
		}
		oldAccepted := err == nil && len(oldOnReplica) > 0 && oldOnReplica[0] == int64(1)

		// The failover: the master's host is lost with the control's T+1
		// still in the delayed link (the link cut, what it held dropped;
		// the master killed), and the replica is promoted.
		if err := rep.Link.Cut(); err != nil {
			t.Fatal(err)
		}
		if err := master.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := rep.Promote(ctx); err != nil {
			t.Fatal(err)
		}
		lagged := cr.Get(ctx, key(b)).Val() == lo.String()
		stale := promoted.Claim(ctx, a, lo)
		if stale != nil && !errors.Is(stale, token.ErrStale) {
			t.Fatalf("round %d: fenced claim %d on the promoted replica: %v", round, lo, stale)
		}
		controlStale := promoted.Claim(ctx, b, lo)
		if controlStale != nil && !errors.Is(controlStale, token.ErrStale) {
			t.Fatalf("round %d: control claim %d on the promoted replica: %v", round, lo, controlStale)
		}
		honest := promoted.Claim(ctx, a, hi)
		if honest != nil && !errors.Is(honest, token.ErrStale) {
			t.Fatalf("round %d: fenced claim %d (equal) on the promoted replica: %v", round, hi, honest)
		}
		s.Add(func(s *attackStats) {
			s.Runs++
			if lagged {
				s.Faults++
			}
			for _, err := range append(viaReplica, stale) {
				s.Attempts++
				if err == nil {
					s.Accepted++
				} else {
					s.Refused++
				}
			}
			if honest != nil {
				s.Lockouts++
			}
			if oldAccepted {
				s.Control++
			}
			if controlStale == nil {
				s.Control++
			}
		})

		// Back to a master and its replica: the old master returns empty,
		// the promoted one follows it again (and resyncs, empty too).
		if err := rep.Link.Restore(); err != nil {
			t.Fatal(err)
		}
		if err := master.Start(true); err != nil {
			t.Fatal(err)
		}
		if err := cr.Do(ctx, "REPLICAOF", linkHost, linkPort).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rep.WaitSynced(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// lagIsReadOnly reports a replica's refusal of a write.
func lagIsReadOnly(err error) bool {
	return err != nil && strings.Contains(err.Error(), "READONLY")
}
