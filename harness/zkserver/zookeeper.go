package zkserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/harness"
)

// EnvAddrs is a comma-separated list of host:port of one ZooKeeper ensemble
// for the shared helper.
const EnvAddrs = "FENCEGUARD_ZK_ADDRS"

const pollEvery = 25 * time.Millisecond

// DB is a test's share of a ZooKeeper ensemble: its own chroot, created for
// it and deleted (with everything below) when the test ends, on servers
// from the environment too.
// go-zookeeper takes no chroot in its server list: put Chroot in front of
// every path.
type DB struct {
	Addrs  []string        // host:port, for zk.Connect
	Chroot string          // e.g. "/fg/1a2b3c-7-TestLock"; exists; unique per test and process
	Server *harness.Server // the process when the harness started it, else nil; no faults: it is shared
}

// Shared returns the package's shared ZooKeeper server (started on first
// use) with a fresh chroot for the calling test.
func Shared(t testing.TB) *DB {
	t.Helper()
	sh := shared.Get(t, startShared)
	chroot := "/fg/" + harness.Namespace(t)
	if err := createChroot(sh.addrs, chroot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := zkDo(sh.addrs, func(c *zk.Conn) error { return deleteAll(c, chroot) }); err != nil {
			t.Logf("zkserver: deleting chroot %s: %v", chroot, err)
		}
	})
	return &DB{Addrs: append([]string(nil), sh.addrs...), Chroot: chroot, Server: sh.server}
}

type zkShared struct {
	addrs  []string
	server *harness.Server
}

var shared harness.Shared[zkShared]

// ExamplesNeed declares that the package's Example functions use the shared
// ZooKeeper server ([Example]); call it from TestMain before harness.Main.
func ExamplesNeed() {
	harness.ExamplesNeed("ZooKeeper", func() (string, error) {
		_, skip, err := shared.Load(startShared)
		return skip, err
	})
}

// Example returns the package's shared ZooKeeper server with a chroot of
// the calling Example function's own. It stays until the server goes at
// the end of the package (a server from the environment keeps it).
func Example() *DB {
	sh, skip, err := shared.Load(startShared)
	if skip != "" || err != nil {
		harness.ExampleUnavailable("ZooKeeper", skip, err)
	}
	chroot := "/fg/" + harness.ExampleID()
	if err := createChroot(sh.addrs, chroot); err != nil {
		harness.ExampleUnavailable("ZooKeeper", "", err)
	}
	return &DB{Addrs: append([]string(nil), sh.addrs...), Chroot: chroot, Server: sh.server}
}

func startShared() (zkShared, string, error) {
	if addrs := harness.EnvList(EnvAddrs); len(addrs) > 0 {
		return zkShared{addrs: addrs}, "", nil
	}
	if k := newZKKind(); k != nil {
		s, err := harness.Launch(k, "zookeeper", 1)
		if err != nil {
			return zkShared{}, "", err
		}
		return zkShared{addrs: []string{s.Addr()}, server: s}, "", nil
	}
	return zkShared{}, harness.NoServerMessage("ZooKeeper", EnvAddrs, "zookeeper"), nil
}

// New starts a standalone ZooKeeper server for the calling test alone, to
// inject faults into; it is torn down when the test ends. Sessions may time
// out between 1 s and 60 s.
func New(t testing.TB) *harness.Server {
	t.Helper()
	return NewWith(t, Options{})
}

// Options configure a server of a test's own ([NewWith]). Zero fields keep
// ZooKeeper's defaults.
type Options struct {
	// ContainerCheck is how often the server deletes the container znodes
	// that had children and have none left (znode.container.checkIntervalMs;
	// ZooKeeper's default is a minute).
	ContainerCheck time.Duration

	// ContainerRate bounds the container znodes deleted per minute
	// (znode.container.maxPerMinute; ZooKeeper's default is 10,000).
	ContainerRate int

	// HeapMiB is the JVM's maximum heap in MiB (-Xmx); 0 is the harness's
	// 256. ZooKeeper keeps every znode in memory: a test that creates
	// hundreds of thousands needs more.
	HeapMiB int
}

// NewWith is [New] with options.
func NewWith(t testing.TB, o Options) *harness.Server {
	t.Helper()
	harness.RequireMain(t)
	k := newZKKind()
	if k == nil {
		harness.SkipOrFail(t, harness.NoBinaryMessage("zkserver.New", "ZooKeeper (java and /usr/share/java/zookeeper.jar)", "zookeeper"))
	}
	if o.ContainerCheck > 0 {
		k.props = append(k.props, fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", max(o.ContainerCheck.Milliseconds(), 1)))
	}
	if o.HeapMiB > 0 {
		k.heap = fmt.Sprintf("-Xmx%dm", o.HeapMiB)
	}
	if o.ContainerRate > 0 {
		k.props = append(k.props, fmt.Sprintf("-Dznode.container.maxPerMinute=%d", o.ContainerRate))
	}
	s, err := harness.Launch(k, "zookeeper", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, s)
	return s
}

// Where Debian's zookeeper package puts its jars. zookeeper.jar's manifest
// names the rest of its classpath (jute, slf4j-api, netty, …); the log4j
// binding is ours to add.
const javaDir = "/usr/share/java"

type zkKind struct {
	java      string
	classpath string
	props     []string // -D flags for the JVM
	heap      string   // -Xmx flag; "" is -Xmx256m
}

func newZKKind() *zkKind {
	java := harness.FindBinary("java", "/usr/bin/java")
	jar := filepath.Join(javaDir, "zookeeper.jar")
	if java == "" {
		return nil
	}
	if _, err := os.Stat(jar); err != nil {
		return nil
	}
	cp := []string{jar}
	for _, j := range []string{"slf4j-log4j12.jar", "log4j-1.2.jar"} {
		if _, err := os.Stat(filepath.Join(javaDir, j)); err == nil {
			cp = append(cp, filepath.Join(javaDir, j))
		}
	}
	return &zkKind{java: java, classpath: strings.Join(cp, ":")}
}

func (*zkKind) Prepare(ctx context.Context, s *harness.Server) error { return writeZKConfig(s, "") }

// writeZKConfig writes zoo.cfg, with extra appended (an ensemble member's
// server lines), and log4j.properties into s's directory.
func writeZKConfig(s *harness.Server, extra string) error {
	if err := os.MkdirAll(s.DataDir(), 0o755); err != nil {
		return err
	}
	// Every client connects from 127.0.0.1: lift ZooKeeper's default cap of
	// 60 connections per address (maxClientCnxns), which a test with many
	// clients reaches, and past which new connections hang in retries.
	cfg := fmt.Sprintf(`tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=srvr,ruok,mntr,envi
forceSync=no
maxClientCnxns=0
`, s.DataDir(), s.Port()) + extra
	const log4j = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
`
	if err := os.WriteFile(filepath.Join(s.Dir(), "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir(), "log4j.properties"), []byte(log4j), 0o644)
}

func (k *zkKind) Command(s *harness.Server) (*exec.Cmd, error) {
	heap := k.heap
	if heap == "" {
		heap = "-Xmx256m"
	}
	args := []string{
		heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData", // no /tmp/hsperfdata_* file left by a killed JVM
		"-Dlog4j.configuration=file:" + filepath.Join(s.Dir(), "log4j.properties"),
		"-Dzookeeper.log.dir=" + s.Dir(),
	}
	args = append(args, k.props...)
	args = append(args, "-cp", k.classpath,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain",
		filepath.Join(s.Dir(), "zoo.cfg"),
	)
	cmd := exec.Command(k.java, args...)
	cmd.Dir = s.Dir() // shows as user.dir in "envi": how probe recognises its server
	return cmd, nil
}

// Ready: "ruok" answers before the server serves; "srvr" has a Mode: line
// only once it does. "envi" tells whether it is our process that answers.
func (*zkKind) Ready(ctx context.Context, s *harness.Server, pid int) error {
	if _, err := mode(ctx, s.Addr()); err != nil {
		return err
	}
	env, err := fourLetter(ctx, s.Addr(), "envi")
	if err != nil {
		return err
	}
	if !strings.Contains(env, "user.dir="+s.Dir()+"\n") {
		return fmt.Errorf("%w: another ZooKeeper answers on %s", harness.ErrPortTaken, s.Addr())
	}
	return nil
}

func (*zkKind) StopSignal() syscall.Signal    { return syscall.SIGTERM }
func (*zkKind) GracefulTeardown() bool        { return false }
func (*zkKind) CanWipe(*harness.Server) error { return nil }

// zkDo runs fn on a fresh session that is closed afterwards.
func zkDo(addrs []string, fn func(*zk.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return withConn(ctx, addrs, fn)
}

// createChroot creates chroot and its parents.
func createChroot(addrs []string, chroot string) error {
	if err := zkDo(addrs, func(c *zk.Conn) error { return createAll(c, chroot) }); err != nil {
		return fmt.Errorf("zkserver: creating chroot %s: %w", chroot, err)
	}
	return nil
}
