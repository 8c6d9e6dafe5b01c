package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// ClusterNodeTimeout is the cluster-node-timeout of the nodes
// [NewCluster] starts: a master that does not answer for this long is
// failed over to one of its replicas (the election takes about as long
// again).
const ClusterNodeTimeout = 1000 * time.Millisecond

// ClusterSlots is the number of hash slots of a Redis Cluster.
const ClusterSlots = 16384

// Cluster is a Redis Cluster the harness started for one test, to run
// cluster clients against and to fail over and reshard. Its nodes keep their
// addresses across restarts; their roles change with failovers, so ask
// [Cluster.Masters] and [Cluster.Replicas] rather than remembering.
//
// A node restarted with Start(false) after Stop or Kill rejoins the cluster
// with its nodes.conf (a killed master that was failed over comes back as a
// replica of its successor). Nodes cannot be wiped (Start(true) fails): a
// node without its nodes.conf is a stranger to the cluster.
//
// Nodes announce their own loopback addresses (CLUSTER SLOTS): a cluster
// client connects to them directly, so a [harness.Proxy] in front of one node does
// not partition the client from it.
type Cluster struct {
	// Nodes are all nodes in start order: the masters first (node i
	// served the i-th range of slots at the start), then the replicas,
	// replicasPerMaster per master in master order.
	Nodes []*harness.Server

	ids map[*harness.Server]string // node id, fixed for the node's life

	mu    sync.Mutex
	links map[*harness.Server]*harness.Proxy // with ClusterOptions.Links
}

// NewCluster starts a Redis Cluster of masters masters, each with
// replicasPerMaster replicas, for the calling test alone, with the slots
// split evenly across the masters (master i gets the i-th range, as
// redis-cli --cluster create does). It returns once every node reports
// cluster_state:ok and agrees on the slot map, and every replica has synced.
// It is torn down (SIGKILL) when the test ends.
//
// Nodes run with cluster-node-timeout [ClusterNodeTimeout],
// cluster-require-full-coverage no (slots of a failed master fail alone, the
// others keep serving), cluster-replica-validity-factor 0 (a replica that lost
// its master for a while can still be promoted) and
// cluster-allow-replica-migration no (replicas stay with their master).
func NewCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	return NewClusterWith(t, ClusterOptions{Masters: masters, ReplicasPerMaster: replicasPerMaster})
}

// ClusterOptions configure [NewClusterWith].
type ClusterOptions struct {
	Masters, ReplicasPerMaster int

	// Links puts a [harness.Proxy] in front of every node ([Cluster.Link])
	// and has the node announce the proxy's address (cluster-announce-port)
	// in place of its own; the cluster bus stays direct. Replicas then
	// replicate through their master's proxy: Link(master).Blackhole()
	// stalls its replication silently, Cut() breaks it. CLUSTER SLOTS,
	// MOVED and ASK name the proxies too, so a cluster client would go
	// through them as well: give it [Cluster.Dialer] to reach the
	// nodes directly.
	Links bool
}

// NewClusterWith is [NewCluster] with options.
func NewClusterWith(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	harness.RequireMain(t)
	masters, replicasPerMaster := o.Masters, o.ReplicasPerMaster
	if masters < 1 || replicasPerMaster < 0 {
		t.Fatalf("redisserver: NewCluster(%d, %d)", masters, replicasPerMaster)
	}
	if binary() == "" {
		harness.SkipOrFail(t, harness.NoBinaryMessage("redisserver.NewCluster", "redis-server", "redis-server"))
	}
	c := &Cluster{ids: map[*harness.Server]string{}, links: map[*harness.Server]*harness.Proxy{}}
	n := masters * (1 + replicasPerMaster)
	k := clusterKind{kind: kind{bin: binary()}}
	if o.Links {
		k.announce = func(s *harness.Server) (int, error) {
			c.mu.Lock()
			defer c.mu.Unlock()
			p, ok := c.links[s]
			if !ok {
				var err error
				if p, err = harness.StartProxy(s.Addr()); err != nil {
					return 0, err
				}
				c.links[s] = p
			}
			_, port, _ := net.SplitHostPort(p.Addr())
			return strconv.Atoi(port)
		}
		t.Cleanup(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, p := range c.links {
				p.Close()
			}
		})
	}
	srvs := make([]*harness.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = harness.Launch(k, "redis-cluster", 2)
		}()
	}
	wg.Wait()
	for _, s := range srvs {
		if s != nil {
			harness.Cleanup(t, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c.Nodes = srvs
	ctx, cancel := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancel()
	if err := c.create(ctx, masters, replicasPerMaster); err != nil {
		t.Fatalf("redisserver: creating a Redis Cluster of %d masters × %d replicas: %v", masters, replicasPerMaster, err)
	}
	return c
}

// Link returns the proxy node s announces, nil unless the cluster was
// started with ClusterOptions.Links.
func (c *Cluster) Link(s *harness.Server) *harness.Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.links[s]
}

// NodeAddr maps an address the cluster announces (a Link's, with
// ClusterOptions.Links) to the node's own; other addresses are
// returned as they are.
func (c *Cluster) NodeAddr(addr string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, p := range c.links {
		if p.Addr() == addr {
			return s.Addr()
		}
	}
	return addr
}

// Dialer returns a dial function (go-redis's ClusterOptions.Dialer) that
// connects to the node behind an announced address directly, bypassing its
// Link.
func (c *Cluster) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, c.NodeAddr(addr))
	}
}

type clusterKind struct {
	kind
	announce func(*harness.Server) (int, error) // the port to announce; nil: the node's own
}

func (k clusterKind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd, err := k.kind.Command(s)
	if err != nil {
		return nil, err
	}
	cmd.Args = append(cmd.Args,
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(s.DataDir(), "nodes.conf"),
		"--cluster-port", strconv.Itoa(s.PeerPort()),
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout/time.Millisecond)),
		"--cluster-require-full-coverage", "no",
		"--cluster-replica-validity-factor", "0",
		"--cluster-allow-replica-migration", "no",
	)
	if k.announce != nil {
		port, err := k.announce(s)
		if err != nil {
			return nil, err
		}
		cmd.Args = append(cmd.Args,
			"--cluster-announce-ip", "127.0.0.1",
			"--cluster-announce-port", strconv.Itoa(port),
			"--cluster-announce-bus-port", strconv.Itoa(s.PeerPort()))
	}
	return cmd, nil
}

func (clusterKind) CanWipe(s *harness.Server) error {
	return fmt.Errorf("redisserver: %s: a Redis Cluster node cannot be wiped (it would lose its nodes.conf and leave the cluster)", s.Name())
}

func (c *Cluster) create(ctx context.Context, masters, replicas int) error {
	for _, s := range c.Nodes {
		id, err := do(ctx, s.Addr(), "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		c.ids[s] = id.(string)
	}
	for i := range masters {
		s := c.Nodes[i]
		lo, hi := i*ClusterSlots/masters, (i+1)*ClusterSlots/masters-1
		if _, err := do(ctx, s.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
		// Distinct epochs, as redis-cli sets them: no collisions to resolve.
		if _, err := do(ctx, s.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	first := c.Nodes[0]
	for _, s := range c.Nodes[1:] {
		if _, err := do(ctx, first.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.Port()), strconv.Itoa(s.PeerPort())); err != nil {
			return fmt.Errorf("%s: MEET %s: %w", first.Name(), s.Name(), err)
		}
	}
	// A replica can only REPLICATE a master it knows.
	if err := c.poll(ctx, func(ctx context.Context) error {
		for _, s := range c.Nodes {
			nodes, err := clusterNodes(ctx, s.Addr())
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name(), err)
			}
			known := 0
			for _, n := range nodes {
				if !n.has("handshake") && !n.has("noaddr") {
					known++
				}
			}
			if known != len(c.Nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", s.Name(), known, len(c.Nodes))
			}
		}
		return nil
	}); err != nil {
		return err
	}
	for i := range masters * replicas {
		s, m := c.Nodes[masters+i], c.Nodes[i%masters]
		if _, err := do(ctx, s.Addr(), "CLUSTER", "REPLICATE", c.ids[m]); err != nil {
			return fmt.Errorf("%s: REPLICATE %s: %w", s.Name(), m.Name(), err)
		}
	}
	return c.WaitHealthy(ctx)
}

// ID returns the cluster node id of s.
func (c *Cluster) ID(s *harness.Server) string { return c.ids[s] }

// Addrs returns the addresses of all nodes, to seed a cluster client with.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// node returns the Server with the given address or id.
func (c *Cluster) node(addrOrID string) *harness.Server {
	for _, s := range c.Nodes {
		if s.Addr() == addrOrID || c.ids[s] == addrOrID {
			return s
		}
	}
	return nil
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string // addr without the bus port
	flags    []string
	master   string // the master's id for a replica, else "-"
	slots    []string
}

func (n clusterNode) has(flag string) bool {
	for _, f := range n.flags {
		if f == flag {
			return true
		}
	}
	return false
}

func clusterNodes(ctx context.Context, addr string) ([]clusterNode, error) {
	v, err := do(ctx, addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	s, _ := v.(string)
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		a := f[1]
		if i := strings.IndexAny(a, "@,"); i >= 0 {
			a = a[:i]
		}
		out = append(out, clusterNode{id: f[0], addr: a, flags: strings.Split(f[2], ","), master: f[3], slots: f[8:]})
	}
	return out, nil
}

// poll runs check until it passes or ctx ends.
func (c *Cluster) poll(ctx context.Context, check func(context.Context) error) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%v: %w", err, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// view is the cluster as the running nodes see it: each node's role and
// master, and the owner of every slot, once they all agree.
type view struct {
	master map[*harness.Server]*harness.Server // replica → its master; masters map to nil
	owner  [ClusterSlots]*harness.Server
}

// agreedView reads CLUSTER NODES from every running node and fails unless
// they all agree on the roles of the running nodes and the owner of every
// slot, no running node is flagged failing, no slot is being migrated, and
// every running node reports cluster_state:ok.
func (c *Cluster) agreedView(ctx context.Context) (*view, error) {
	var ref *view
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		info, err := do(ctx, s.Addr(), "CLUSTER", "INFO")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		if st := parseInfo(info.(string))["cluster_state"]; st != "ok" {
			return nil, fmt.Errorf("%s: cluster_state %q", s.Name(), st)
		}
		nodes, err := clusterNodes(ctx, s.Addr())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Name(), err)
		}
		v := &view{master: map[*harness.Server]*harness.Server{}}
		for _, n := range nodes {
			srv := c.node(n.id)
			if srv == nil {
				return nil, fmt.Errorf("%s: unknown node %s (%s)", s.Name(), n.id, n.addr)
			}
			if !srv.Running() {
				continue
			}
			if n.has("fail") || n.has("fail?") {
				return nil, fmt.Errorf("%s sees running %s as failing (%v)", s.Name(), srv.Name(), n.flags)
			}
			switch {
			case n.has("master"):
				v.master[srv] = nil
			case n.has("slave"):
				m := c.node(n.master)
				if m == nil {
					return nil, fmt.Errorf("%s: %s replicates unknown %s", s.Name(), srv.Name(), n.master)
				}
				v.master[srv] = m
			}
			for _, r := range n.slots {
				if strings.HasPrefix(r, "[") {
					return nil, fmt.Errorf("%s: slot %s is being migrated", s.Name(), r)
				}
				lo, hi, _ := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if hi != "" {
					b, _ = strconv.Atoi(hi)
				}
				for i := a; i <= b && i < ClusterSlots; i++ {
					v.owner[i] = srv
				}
			}
		}
		if ref == nil {
			ref = v
			continue
		}
		if ref.owner != v.owner {
			return nil, fmt.Errorf("%s disagrees with the other nodes on the slot map", s.Name())
		}
		for k, m := range v.master {
			if rm, ok := ref.master[k]; !ok || rm != m {
				return nil, fmt.Errorf("%s disagrees with the other nodes on the role of %s", s.Name(), k.Name())
			}
		}
	}
	if ref == nil {
		return nil, errors.New("no node is running")
	}
	for slot, o := range ref.owner {
		if o != nil && ref.master[o] != nil {
			return nil, fmt.Errorf("slot %d is served by replica %s", slot, o.Name())
		}
	}
	return ref, nil
}

// WaitHealthy waits until every running node reports cluster_state:ok, they
// all agree on the slot map and the roles, no slot is being migrated, every
// slot is served by a running master, and every running replica has synced
// with its master.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return c.poll(ctx, c.healthy)
}

func replicaSynced(ctx context.Context, m, r *harness.Server) error {
	target, err := redisInfoField(ctx, m.Addr(), "replication", "master_repl_offset")
	if err != nil {
		return fmt.Errorf("%s: %w", m.Name(), err)
	}
	want, _ := strconv.ParseInt(target, 10, 64)
	info, err := redisInfo(ctx, r.Addr(), "replication")
	if err != nil {
		return fmt.Errorf("%s: %w", r.Name(), err)
	}
	got, _ := strconv.ParseInt(info["slave_repl_offset"], 10, 64)
	switch {
	case info["master_link_status"] != "up":
		return fmt.Errorf("%s: master_link_status %q", r.Name(), info["master_link_status"])
	case got < want:
		return fmt.Errorf("%s at offset %d, its master %s at %d", r.Name(), got, m.Name(), want)
	}
	return nil
}

// Masters returns the running masters that serve slots, in node order.
func (c *Cluster) Masters(ctx context.Context) ([]*harness.Server, error) {
	v, err := c.agreedView(ctx)
	if err != nil {
		return nil, err
	}
	serving := map[*harness.Server]bool{}
	for _, o := range v.owner {
		serving[o] = true
	}
	var out []*harness.Server
	for _, s := range c.Nodes {
		if _, ok := v.master[s]; ok && v.master[s] == nil && serving[s] {
			out = append(out, s)
		}
	}
	return out, nil
}

// Replicas returns the running replicas of master, in node order.
func (c *Cluster) Replicas(ctx context.Context, master *harness.Server) ([]*harness.Server, error) {
	v, err := c.agreedView(ctx)
	if err != nil {
		return nil, err
	}
	var out []*harness.Server
	for _, s := range c.Nodes {
		if m, ok := v.master[s]; ok && m == master && master != nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// MasterForSlot returns the master serving slot, as all running nodes
// agree.
func (c *Cluster) MasterForSlot(ctx context.Context, slot int) (*harness.Server, error) {
	if slot < 0 || slot >= ClusterSlots {
		return nil, fmt.Errorf("redisserver: slot %d out of range", slot)
	}
	v, err := c.agreedView(ctx)
	if err != nil {
		return nil, err
	}
	if v.owner[slot] == nil {
		return nil, fmt.Errorf("redisserver: slot %d is not served", slot)
	}
	return v.owner[slot], nil
}

// MasterForKey is MasterForSlot(ctx, KeySlot(key)).
func (c *Cluster) MasterForKey(ctx context.Context, key string) (*harness.Server, error) {
	return c.MasterForSlot(ctx, KeySlot(key))
}

// KeySlot returns the cluster hash slot of key: CRC16 (XMODEM) of the key,
// or of its hash tag — the part between the first "{" and the first "}"
// after it, when that is not empty — modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % ClusterSlots)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Failover makes a replica of master take over its slots with CLUSTER
// FAILOVER (a coordinated failover: the replica catches up with the master
// first, so nothing acknowledged is lost), waits until the cluster is
// healthy again, and returns the new master. The old master becomes its
// replica.
func (c *Cluster) Failover(ctx context.Context, master *harness.Server) (*harness.Server, error) {
	reps, err := c.Replicas(ctx, master)
	if err != nil {
		return nil, fmt.Errorf("redisserver: failover of %s: %w", master.Name(), err)
	}
	if len(reps) == 0 {
		return nil, fmt.Errorf("redisserver: failover of %s: it has no replica", master.Name())
	}
	r := reps[0]
	slots, err := c.slotsOf(ctx, master)
	if err != nil {
		return nil, fmt.Errorf("redisserver: failover of %s: %w", master.Name(), err)
	}
	if _, err := do(ctx, r.Addr(), "CLUSTER", "FAILOVER"); err != nil {
		return nil, fmt.Errorf("redisserver: CLUSTER FAILOVER on %s: %w", r.Name(), err)
	}
	if err := c.waitPromoted(ctx, slots, func(s *harness.Server) bool { return s == r }); err != nil {
		return nil, fmt.Errorf("redisserver: failover of %s to %s: %w", master.Name(), r.Name(), err)
	}
	return r, nil
}

// FailoverTo is Failover with the replica chosen, and CLUSTER FAILOVER
// FORCE when force is set: the replica takes over at once, without
// catching up with its master — what a failover after the master died
// amounts to, the master alive. Writes the replica had not received are
// lost when it takes over.
func (c *Cluster) FailoverTo(ctx context.Context, replica *harness.Server, force bool) error {
	args := []any{"CLUSTER", "FAILOVER"}
	if force {
		args = append(args, "FORCE")
	}
	v, err := c.agreedView(ctx)
	if err != nil {
		return err
	}
	master := v.master[replica]
	if master == nil {
		return fmt.Errorf("redisserver: %s is not a replica", replica.Name())
	}
	slots, err := c.slotsOf(ctx, master)
	if err != nil {
		return err
	}
	if _, err := do(ctx, replica.Addr(), args...); err != nil {
		return fmt.Errorf("redisserver: %v on %s: %w", args, replica.Name(), err)
	}
	return c.waitPromoted(ctx, slots, func(s *harness.Server) bool { return s == replica })
}

// KillFailover kills master (SIGKILL), waits until the cluster promotes one
// of its replicas on its own (after [ClusterNodeTimeout] and an election)
// and is healthy again without it, and returns the new master. Writes the
// master acknowledged that had not reached the promoted replica are lost.
// Restart the old master with Start(false): it rejoins as a replica of the
// new one ([Cluster.WaitHealthy] waits for that).
func (c *Cluster) KillFailover(ctx context.Context, master *harness.Server) (*harness.Server, error) {
	reps, err := c.Replicas(ctx, master)
	if err != nil {
		return nil, fmt.Errorf("redisserver: failover of %s: %w", master.Name(), err)
	}
	if len(reps) == 0 {
		return nil, fmt.Errorf("redisserver: failover of %s: it has no replica", master.Name())
	}
	slots, err := c.slotsOf(ctx, master)
	if err != nil {
		return nil, fmt.Errorf("redisserver: failover of %s: %w", master.Name(), err)
	}
	if err := master.Kill(); err != nil {
		return nil, err
	}
	var promoted *harness.Server
	err = c.waitPromoted(ctx, slots, func(s *harness.Server) bool {
		for _, r := range reps {
			if r == s {
				promoted = s
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("redisserver: failover of killed %s: %w", master.Name(), err)
	}
	return promoted, nil
}

// slotsOf returns the slots old serves, as the running nodes agree.
func (c *Cluster) slotsOf(ctx context.Context, old *harness.Server) ([]int, error) {
	v, err := c.agreedView(ctx)
	if err != nil {
		return nil, err
	}
	var slots []int
	for i, o := range v.owner {
		if o == old {
			slots = append(slots, i)
		}
	}
	if len(slots) == 0 {
		return nil, fmt.Errorf("%s serves no slots", old.Name())
	}
	return slots, nil
}

// waitPromoted waits until slots are all served by one node that ok
// accepts, and the cluster is healthy.
func (c *Cluster) waitPromoted(ctx context.Context, slots []int, ok func(*harness.Server) bool) error {
	return c.poll(ctx, func(ctx context.Context) error {
		if err := c.healthy(ctx); err != nil {
			return err
		}
		v, err := c.agreedView(ctx)
		if err != nil {
			return err
		}
		o := v.owner[slots[0]]
		if o == nil || !ok(o) {
			return fmt.Errorf("slot %d still served by %v", slots[0], o)
		}
		for _, s := range slots {
			if v.owner[s] != o {
				return fmt.Errorf("slot %d served by another node than slot %d", s, slots[0])
			}
		}
		return nil
	})
}

func (c *Cluster) healthy(ctx context.Context) error {
	v, err := c.agreedView(ctx)
	if err != nil {
		return err
	}
	for slot, o := range v.owner {
		if o == nil {
			return fmt.Errorf("slot %d is not served by a running master", slot)
		}
	}
	for r, m := range v.master {
		if m != nil {
			if err := replicaSynced(ctx, m, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// MigrateOptions tune [Cluster.Migrate].
type MigrateOptions struct {
	// Midway, when set, is called once the slot is MIGRATING on its master
	// and IMPORTING on the target and the keys the slot held then have
	// been moved, before the slot is handed over: while it runs, a client
	// gets ASK redirections for every key of the slot (keys created
	// meanwhile are created on the target). Migrate moves whatever keys
	// are left on the source afterwards, then assigns the slot.
	Midway func(ctx context.Context) error
	// Batch is how many keys one MIGRATE moves; default 100.
	Batch int
}

// Migrate moves slot to master to (resharding, as redis-cli --cluster
// reshard does): CLUSTER SETSLOT IMPORTING on to and MIGRATING on the
// slot's master, MIGRATE of its keys, then SETSLOT NODE on every master.
// Clients see ASK during the move and MOVED after it. It returns once the
// cluster is healthy with the slot on to.
func (c *Cluster) Migrate(ctx context.Context, slot int, to *harness.Server, o MigrateOptions) error {
	if o.Batch <= 0 {
		o.Batch = 100
	}
	from, err := c.MasterForSlot(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	sl := strconv.Itoa(slot)
	if _, err := do(ctx, to.Addr(), "CLUSTER", "SETSLOT", sl, "IMPORTING", c.ids[from]); err != nil {
		return fmt.Errorf("redisserver: %s: SETSLOT %d IMPORTING: %w", to.Name(), slot, err)
	}
	if _, err := do(ctx, from.Addr(), "CLUSTER", "SETSLOT", sl, "MIGRATING", c.ids[to]); err != nil {
		return fmt.Errorf("redisserver: %s: SETSLOT %d MIGRATING: %w", from.Name(), slot, err)
	}
	host, port, _ := net.SplitHostPort(to.Addr())
	move := func() error {
		for {
			v, err := do(ctx, from.Addr(), "CLUSTER", "GETKEYSINSLOT", sl, strconv.Itoa(o.Batch))
			if err != nil {
				return fmt.Errorf("redisserver: %s: GETKEYSINSLOT %d: %w", from.Name(), slot, err)
			}
			keys, _ := v.([]any)
			if len(keys) == 0 {
				return nil
			}
			args := []any{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}
			for _, k := range keys {
				args = append(args, k.(string))
			}
			if _, err := do(ctx, from.Addr(), args...); err != nil {
				return fmt.Errorf("redisserver: %s: MIGRATE to %s: %w", from.Name(), to.Name(), err)
			}
		}
	}
	if err := move(); err != nil {
		return err
	}
	if o.Midway != nil {
		if err := o.Midway(ctx); err != nil {
			return err
		}
		if err := move(); err != nil {
			return err
		}
	}
	// The target first: once the source gives the slot up, clients are
	// sent there, and it must accept them without ASKING.
	masters, err := c.mastersAnyState(ctx)
	if err != nil {
		return err
	}
	order := []*harness.Server{to, from}
	for _, m := range masters {
		if m != to && m != from {
			order = append(order, m)
		}
	}
	for _, m := range order {
		if _, err := do(ctx, m.Addr(), "CLUSTER", "SETSLOT", sl, "NODE", c.ids[to]); err != nil {
			return fmt.Errorf("redisserver: %s: SETSLOT %d NODE %s: %w", m.Name(), slot, to.Name(), err)
		}
	}
	return c.poll(ctx, func(ctx context.Context) error {
		if err := c.healthy(ctx); err != nil {
			return err
		}
		v, err := c.agreedView(ctx)
		if err != nil {
			return err
		}
		if v.owner[slot] != to {
			return fmt.Errorf("slot %d still on %v", slot, v.owner[slot])
		}
		return nil
	})
}

// mastersAnyState lists the running masters as the first running node sees
// them, a slot in migration notwithstanding.
func (c *Cluster) mastersAnyState(ctx context.Context) ([]*harness.Server, error) {
	for _, s := range c.Nodes {
		if !s.Running() {
			continue
		}
		nodes, err := clusterNodes(ctx, s.Addr())
		if err != nil {
			return nil, err
		}
		var out []*harness.Server
		for _, n := range nodes {
			if srv := c.node(n.id); srv != nil && srv.Running() && n.has("master") {
				out = append(out, srv)
			}
		}
		return out, nil
	}
	return nil, errors.New("redisserver: no node is running")
}
