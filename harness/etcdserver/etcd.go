package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness"
)

// EnvEndpoints is a comma-separated list of endpoints of one etcd cluster
// for the shared helper.
const EnvEndpoints = "FENCEGUARD_ETCD_ENDPOINTS"

const pollEvery = 25 * time.Millisecond

// DB is a test's share of an etcd cluster: use only keys under Prefix.
// The keys are deleted when the test ends.
type DB struct {
	Endpoints []string        // host:port (or URLs, from the environment), for clientv3.Config.Endpoints
	Prefix    string          // e.g. "/fg/1a2b3c-7-TestLock/"; unique per test and process
	Server    *harness.Server // the process when the harness started it, else nil; no faults: it is shared
}

// Shared returns the package's shared etcd server (the etcd binary, 3.4 on
// Debian 12, single member, started on first use) with a key prefix for the
// calling test.
func Shared(t testing.TB) *DB {
	t.Helper()
	sh := shared.Get(t, startShared)
	eps := sh.endpoints
	prefix := "/fg/" + harness.Namespace(t) + "/"
	t.Cleanup(func() {
		if err := deletePrefix(eps, prefix); err != nil {
			t.Logf("etcdserver: deleting %s on %v: %v", prefix, eps, err)
		}
	})
	return &DB{Endpoints: append([]string(nil), eps...), Prefix: prefix, Server: sh.server}
}

type etcdShared struct {
	endpoints []string
	server    *harness.Server
}

var shared harness.Shared[etcdShared]

// ExamplesNeed declares that the package's Example functions use the shared
// etcd server ([Example]); call it from TestMain before harness.Main.
func ExamplesNeed() {
	harness.ExamplesNeed("etcd", func() (string, error) {
		_, skip, err := shared.Load(startShared)
		return skip, err
	})
}

// Example returns the package's shared etcd server with a key prefix of
// the calling Example function's own. The keys stay until the server goes
// at the end of the package (an etcd from the environment keeps them).
func Example() *DB {
	sh, skip, err := shared.Load(startShared)
	if skip != "" || err != nil {
		harness.ExampleUnavailable("etcd", skip, err)
	}
	return &DB{Endpoints: append([]string(nil), sh.endpoints...), Prefix: "/fg/" + harness.ExampleID() + "/", Server: sh.server}
}

func startShared() (etcdShared, string, error) {
	if eps := harness.EnvList(EnvEndpoints); len(eps) > 0 {
		return etcdShared{endpoints: eps}, "", nil
	}
	if binary() != "" {
		c, err := launch(1)
		if err != nil {
			return etcdShared{}, "", err
		}
		return etcdShared{endpoints: c.Endpoints(), server: c.Members[0]}, "", nil
	}
	return etcdShared{}, harness.NoServerMessage("etcd", EnvEndpoints, "etcd-server"), nil
}

// New starts a single-member etcd server for the calling test alone, to
// inject faults into; it is torn down when the test ends.
func New(t testing.TB) *harness.Server {
	t.Helper()
	return NewCluster(t, 1).Members[0]
}

// Cluster is an etcd cluster the harness started for one test.
type Cluster struct {
	Members []*harness.Server // member i is named Members[i].Name()
}

// NewCluster starts an n-member etcd cluster for the calling test alone
// and returns once it has a leader. It is torn down (SIGKILL) when the test
// ends. A member restarted with Start(false) rejoins with its data; a member
// cannot be wiped.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	harness.RequireMain(t)
	if binary() == "" {
		harness.SkipOrFail(t, harness.NoBinaryMessage("etcdserver.New", "etcd", "etcd-server"))
	}
	c, err := launch(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Members {
		harness.Cleanup(t, s)
	}
	return c
}

// Endpoints returns the client endpoints of all members.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Members))
	for i, s := range c.Members {
		eps[i] = s.Addr()
	}
	return eps
}

// Leader returns the member that is leader now, waiting for an election in
// progress until ctx ends. Only running members are asked.
func (c *Cluster) Leader(ctx context.Context) (*harness.Server, error) {
	cli, err := newClient(c.Endpoints())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, s := range c.Members {
			if !s.Running() {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := cli.Status(sctx, s.Addr())
			cancel()
			if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("etcdserver: no etcd leader: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// launch starts an n-member cluster and waits until each member answers
// and the cluster serves a linearizable read. Ports taken by others mean a
// fresh attempt; on error no member is left running.
func launch(n int) (*Cluster, error) {
	var err error
	for range 3 {
		var c *Cluster
		c, err = tryLaunch(n)
		if err == nil {
			return c, nil
		}
		if c != nil {
			for _, s := range c.Members {
				s.Close()
			}
		}
		if !errors.Is(err, harness.ErrPortTaken) {
			break
		}
	}
	return nil, err
}

func tryLaunch(n int) (*Cluster, error) {
	k := &kind{bin: binary(), members: n, token: "fg-" + harness.UniqueID()}
	c := &Cluster{}
	var peers []string
	for range n {
		s, err := harness.Create(k, "etcd", 2)
		if err != nil {
			return c, err
		}
		c.Members = append(c.Members, s)
		peers = append(peers, s.Name()+"=http://127.0.0.1:"+strconv.Itoa(s.PeerPort()))
	}
	k.initialCluster = strings.Join(peers, ",")

	// All must run before any can have a quorum: they start at once, and
	// each is ready once it answers (see Ready).
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, s := range c.Members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Start(false)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	// A linearizable read goes through the leader: the cluster is usable.
	ctx, cancel := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancel()
	cli, err := newClient(c.Endpoints())
	if err != nil {
		return c, err
	}
	defer cli.Close()
	for {
		gctx, gcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(gctx, "fenceguard/ready")
		gcancel()
		if err == nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("etcdserver: etcd cluster of %d has no leader after %v: %w", n, harness.StartTimeout, err)
		case <-time.After(pollEvery):
		}
	}
}

func binary() string { return harness.FindBinary("etcd", "/usr/bin/etcd") }

// kind runs one member of a cluster of the etcd binary.
type kind struct {
	bin            string
	token          string // every member of one cluster needs the same
	members        int
	initialCluster string // name=peerURL,…; set before the first start
}

func (*kind) Prepare(ctx context.Context, s *harness.Server) error { return nil }

func (k *kind) Command(s *harness.Server) (*exec.Cmd, error) {
	client := "http://" + s.Addr()
	peer := "http://127.0.0.1:" + strconv.Itoa(s.PeerPort())
	cmd := exec.Command(k.bin,
		"--name", s.Name(),
		"--data-dir", s.DataDir(),
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", k.initialCluster,
		"--initial-cluster-token", k.token,
		"--initial-cluster-state", "new", // ignored on restarts: the WAL knows better
		"--logger", "zap",
		"--log-outputs", "stderr",
	)
	cmd.Dir = s.Dir()
	// An ETCD_* variable duplicating a flag makes etcd exit.
	cmd.Env = harness.ChildEnv("ETCD_", "ETCDCTL_")
	return cmd, nil
}

// Ready: the member answers Status and is the member we started. A lone
// member must also serve a linearizable read; a cluster member cannot until
// a quorum runs, which launch checks for the whole cluster.
func (k *kind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	cli, err := newClient([]string{s.Addr()})
	if err != nil {
		return err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, s.Addr())
	if err != nil {
		return err
	}
	ms, err := cli.MemberList(ctx)
	if err != nil {
		return err
	}
	for _, m := range ms.Members {
		if m.ID == st.Header.MemberId && m.Name != s.Name() {
			return fmt.Errorf("%w: member %q answers on %s", harness.ErrPortTaken, m.Name, s.Addr())
		}
	}
	if k.members == 1 {
		_, err = cli.Get(ctx, "fenceguard/ready")
	}
	return err
}

func (*kind) StopSignal() syscall.Signal { return syscall.SIGTERM }

// gracefulTeardown: a leader stopping gracefully spends seconds handing over.
func (*kind) GracefulTeardown() bool { return false }

func (k *kind) CanWipe(*harness.Server) error {
	if k.members > 1 {
		return errors.New("etcdserver: an etcd cluster member cannot be wiped: it would rejoin having lost its log")
	}
	return nil
}

func deletePrefix(eps []string, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := newClient(eps)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Delete(ctx, prefix, clientv3.WithPrefix())
	return err
}

// newClient returns a quiet client of the harness's own.
func newClient(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
}
