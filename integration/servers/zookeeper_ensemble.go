package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZKEnsemble is a ZooKeeper ensemble (a quorum of QuorumPeerMain processes)
// the harness started for one test, to read through chosen members and to
// inject faults into. Member i has myid i+1.
//
// A session's reads are served by the member it is connected to, which may
// lag the leader: that is how a stale read reaches a client. Connect to one
// chosen member with [ConnectZooKeeper]; find who leads with
// [ZKEnsemble.Leader] and [ZKEnsemble.Roles].
type ZKEnsemble struct {
	Members []*Server
}

// NewZooKeeperEnsemble starts an n-member ZooKeeper ensemble for the calling
// test alone and returns once it serves: srvr shows one leader and n−1
// followers. It is torn down (SIGKILL) when the test ends. Sessions may
// time out between 1 s and 60 s, as with [NewZooKeeper]. A stopped member
// restarted with Start rejoins the ensemble (wiped, it resyncs from the
// leader). Three members take about a second to start on an idle machine.
func NewZooKeeperEnsemble(t testing.TB, n int) *ZKEnsemble {
	t.Helper()
	requireMain(t)
	if n < 1 {
		t.Fatalf("servers: an ensemble of %d members", n)
	}
	base := newZKKind()
	if base == nil {
		unavailable(t, noBinaryMsg("NewZooKeeperEnsemble", "ZooKeeper (java and /usr/share/java/zookeeper.jar)", "zookeeper"))
	}
	e, err := launchZKEnsemble(base, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range e.Members {
		dedicated(t, s)
	}
	return e
}

// Addrs returns the client addresses of all members, in member order.
func (e *ZKEnsemble) Addrs() []string {
	out := make([]string, len(e.Members))
	for i, s := range e.Members {
		out[i] = s.Addr()
	}
	return out
}

// Roles returns what each running member reports as its mode now
// ("leader", "follower"); members that are stopped, paused, or not serving
// (no quorum, an election in progress) are left out.
func (e *ZKEnsemble) Roles(ctx context.Context) map[*Server]string {
	out := map[*Server]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range e.Members {
		if !s.Running() {
			continue
		}
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if m, err := zkMode(qctx, s.Addr()); err == nil {
				mu.Lock()
				out[s] = m
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// Leader returns the member that leads, once every running member serves
// (one leader, the others followers), waiting for an election in progress
// until ctx ends; followers are the others, in member order.
func (e *ZKEnsemble) Leader(ctx context.Context) (leader *Server, followers []*Server, err error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		running := 0
		for _, s := range e.Members {
			if s.Running() {
				running++
			}
		}
		roles := e.Roles(ctx)
		leader, followers = nil, nil
		leaders := 0
		for _, s := range e.Members {
			switch roles[s] {
			case "leader":
				leader = s
				leaders++
			case "follower":
				followers = append(followers, s)
			}
		}
		if leaders == 1 && len(followers) == running-1 {
			return leader, followers, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("servers: ZooKeeper ensemble not serving (roles %v): %w", describeRoles(e, roles), context.Cause(ctx))
		case <-tick.C:
		}
	}
}

func describeRoles(e *ZKEnsemble, roles map[*Server]string) string {
	var parts []string
	for _, s := range e.Members {
		r := roles[s]
		if r == "" {
			r = "-"
		}
		parts = append(parts, s.name+"="+r)
	}
	return strings.Join(parts, " ")
}

// ConnectZooKeeper opens a go-zookeeper connection to the one server at
// addr and waits until it has a session. go-zookeeper connects to a random
// server of its list and moves to another when a connection breaks; with
// this one-element list the session stays on that member, reconnects
// included, so the test knows which member serves its reads. The
// connection is closed when the test ends.
func ConnectZooKeeper(t testing.TB, addr string, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	c, events, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("servers: connecting to ZooKeeper at %s: %v", addr, err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events { // until go-zookeeper's goroutines are done
		}
	})
	timeout := time.NewTimer(startTimeout)
	defer timeout.Stop()
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-timeout.C:
			t.Fatalf("servers: no ZooKeeper session with %s after %v", addr, startTimeout)
		}
	}
	return c
}

// zkMode returns the Mode: line of a member's srvr answer.
func zkMode(ctx context.Context, addr string) (string, error) {
	out, err := fourLetter(ctx, addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("srvr: not serving: %q", strings.TrimSpace(out))
}

// zkMemberKind is one member of an ensemble: a standalone server's
// configuration plus its myid and the ensemble's server lines.
type zkMemberKind struct {
	*zkKind
	myid     int
	election int              // the member's leader-election port
	ensemble *zkEnsembleLines // shared by the members; set before the first start
}

type zkEnsembleLines struct{ cfg string }

func (k *zkMemberKind) prepare(ctx context.Context, s *Server) error {
	if err := writeZKConfig(s, k.ensemble.cfg); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dataDir(), "myid"), []byte(strconv.Itoa(k.myid)+"\n"), 0o644)
}

// launchZKEnsemble starts the members and waits until the ensemble serves.
// Ports another process took first mean a fresh attempt; on error no member
// is left running.
func launchZKEnsemble(base *zkKind, n int) (*ZKEnsemble, error) {
	var err error
	for range 3 {
		var e *ZKEnsemble
		e, err = tryLaunchZKEnsemble(base, n)
		if err == nil {
			return e, nil
		}
		if e != nil {
			for _, s := range e.Members {
				s.destroy()
			}
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	return nil, err
}

func tryLaunchZKEnsemble(base *zkKind, n int) (*ZKEnsemble, error) {
	lines := &zkEnsembleLines{}
	e := &ZKEnsemble{}
	// Generous limits (in ticks of 500 ms): two shared cores under -race
	// must not make a follower drop out of the quorum.
	cfg := "initLimit=20\nsyncLimit=10\n"
	for i := range n {
		k := &zkMemberKind{zkKind: base, myid: i + 1, ensemble: lines}
		s, err := newServer(k, "zookeeper", 2) // client and quorum ports
		if err != nil {
			return e, err
		}
		e.Members = append(e.Members, s)
		el, err := pickPorts(1)
		if err != nil {
			return e, err
		}
		k.election = el[0]
		cfg += fmt.Sprintf("server.%d=127.0.0.1:%d:%d\n", k.myid, s.peerPort, k.election)
	}
	lines.cfg = cfg

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, s := range e.Members { // all must run before any can serve
		s.mu.Lock()
		err := s.spawnLocked(ctx)
		s.mu.Unlock()
		if err != nil {
			return e, err
		}
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range e.Members {
		wg.Go(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			errs[i] = s.waitReadyLocked(ctx)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return e, err
	}
	if _, _, err := e.Leader(ctx); err != nil {
		return e, err
	}
	return e, nil
}
