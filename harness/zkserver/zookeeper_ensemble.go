package zkserver

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

	"github.com/fenceguard/fenceguard/harness"
)

// Ensemble is a ZooKeeper ensemble (a quorum of QuorumPeerMain processes)
// the harness started for one test, to read through chosen members and to
// inject faults into. Member i has myid i+1.
//
// A session's reads are served by the member it is connected to, which may
// lag the leader: that is how a stale read reaches a client. Connect a
// client to one chosen member (go-zookeeper with a one-address server list
// stays on it, reconnects included); find who leads with [Ensemble.Leader]
// and [Ensemble.Roles].
type Ensemble struct {
	Members []*harness.Server
}

// NewEnsemble starts an n-member ZooKeeper ensemble for the calling
// test alone and returns once it serves: srvr shows one leader and n−1
// followers. It is torn down (SIGKILL) when the test ends. Sessions may time
// out between 1 s and 60 s, as with [New]. A stopped member
// restarted with Start rejoins the ensemble (wiped, it resyncs from the
// leader); Start waits until it serves, which needs a quorum of the others
// running.
func NewEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	harness.RequireMain(t)
	if n < 1 {
		t.Fatalf("zkserver: an ensemble of %d members", n)
	}
	base := newZKKind()
	if base == nil {
		harness.SkipOrFail(t, harness.NoBinaryMessage("zkserver.NewEnsemble", "ZooKeeper (java and /usr/share/java/zookeeper.jar)", "zookeeper"))
	}
	e, err := launchEnsemble(base, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range e.Members {
		harness.Cleanup(t, s)
	}
	return e
}

// Addrs returns the client addresses of all members, in member order.
func (e *Ensemble) Addrs() []string {
	out := make([]string, len(e.Members))
	for i, s := range e.Members {
		out[i] = s.Addr()
	}
	return out
}

// Roles returns what each running member reports as its mode now
// ("leader", "follower"); members that are stopped, paused, or not serving
// (no quorum, an election in progress) are left out.
func (e *Ensemble) Roles(ctx context.Context) map[*harness.Server]string {
	out := map[*harness.Server]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, s := range e.Members {
		if !s.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if m, err := mode(qctx, s.Addr()); err == nil {
				mu.Lock()
				out[s] = m
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// Leader returns the member that leads, once every running member serves
// (one leader, the others followers), waiting for an election in progress
// until ctx ends; followers are the others, in member order.
func (e *Ensemble) Leader(ctx context.Context) (leader *harness.Server, followers []*harness.Server, err error) {
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
			return nil, nil, fmt.Errorf("zkserver: ZooKeeper ensemble not serving (roles %s): %w", e.describe(roles), context.Cause(ctx))
		case <-tick.C:
		}
	}
}

func (e *Ensemble) describe(roles map[*harness.Server]string) string {
	var parts []string
	for _, s := range e.Members {
		r := roles[s]
		if r == "" {
			r = "-"
		}
		parts = append(parts, s.Name()+"="+r)
	}
	return strings.Join(parts, " ")
}

// zkMemberKind is one member of an ensemble: a standalone server's
// configuration plus its myid and the ensemble's server lines.
type zkMemberKind struct {
	*zkKind
	myid     int
	ensemble *zkEnsembleConfig // shared by the members; set before the first start
}

type zkEnsembleConfig struct{ lines string }

func (k *zkMemberKind) Prepare(ctx context.Context, s *harness.Server) error {
	if err := writeZKConfig(s, k.ensemble.lines); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.DataDir(), "myid"), []byte(strconv.Itoa(k.myid)+"\n"), 0o644)
}

// launchEnsemble starts the members and waits until the ensemble serves.
// Ports another process took first mean a fresh attempt; on error no member
// is left running.
func launchEnsemble(base *zkKind, n int) (*Ensemble, error) {
	var err error
	for range 3 {
		var e *Ensemble
		e, err = tryLaunchEnsemble(base, n)
		if err == nil {
			return e, nil
		}
		for _, s := range e.Members {
			s.Close()
		}
		if !errors.Is(err, harness.ErrPortTaken) {
			break
		}
	}
	return nil, err
}

func tryLaunchEnsemble(base *zkKind, n int) (*Ensemble, error) {
	cfg := &zkEnsembleConfig{}
	e := &Ensemble{}
	// Generous limits (in ticks of 500 ms): two shared cores under -race
	// must not make a follower drop out of the quorum.
	lines := "initLimit=20\nsyncLimit=10\n"
	for i := range n {
		k := &zkMemberKind{zkKind: base, myid: i + 1, ensemble: cfg}
		s, err := harness.Create(k, "zookeeper", 2) // client and quorum ports
		if err != nil {
			return e, err
		}
		e.Members = append(e.Members, s)
		election, err := harness.FreePorts(1)
		if err != nil {
			return e, err
		}
		lines += fmt.Sprintf("server.%d=127.0.0.1:%d:%d\n", k.myid, s.PeerPort(), election[0])
	}
	cfg.lines = lines

	// All must run before any can serve: they start at once.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range e.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Start(false)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return e, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancel()
	if _, _, err := e.Leader(ctx); err != nil {
		return e, err
	}
	return e, nil
}
