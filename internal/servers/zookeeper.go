package servers

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

	"github.com/fenceguard/fenceguard/internal/servers/internal/zkwire"
)

// ZK is a test's share of a ZooKeeper ensemble: its own chroot, created for
// it and deleted (with everything below) when the test ends — by the
// harness's own ZooKeeper client, on servers from the environment too.
// go-zookeeper takes no chroot in its server list: put Chroot in front of
// every path.
type ZK struct {
	Addrs  []string // host:port, for zk.Connect
	Chroot string   // e.g. "/fg/1a2b3c-7-TestLock"; exists; unique per test and process
	Server *Server  // the process when the harness started it, else nil; no faults: it is shared
}

// ZooKeeper returns the package's shared ZooKeeper server (started on first
// use) with a fresh chroot for the calling test.
func ZooKeeper(t testing.TB) *ZK {
	t.Helper()
	sh := sharedZK.get(t, startSharedZK)
	chroot := "/fg/" + namespace(t)
	if err := zkCreateChroot(sh.addrs, chroot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := zkDo(sh.addrs, func(ctx context.Context, c *zkwire.Conn) error { return c.DeleteAll(ctx, chroot) }); err != nil {
			t.Logf("servers: deleting chroot %s: %v", chroot, err)
		}
	})
	return &ZK{Addrs: append([]string(nil), sh.addrs...), Chroot: chroot, Server: sh.server}
}

type zkShared struct {
	addrs  []string
	server *Server
}

var sharedZK slot[zkShared]

func startSharedZK() (zkShared, string, error) {
	if addrs := envList(EnvZooKeeperAddrs); len(addrs) > 0 {
		return zkShared{addrs: addrs}, "", nil
	}
	if k := newZKKind(); k != nil {
		s, err := launch(k, "zookeeper", 1)
		if err != nil {
			return zkShared{}, "", err
		}
		return zkShared{addrs: []string{s.Addr()}, server: s}, "", nil
	}
	return zkShared{}, noServerMsg("ZooKeeper", EnvZooKeeperAddrs, "zookeeper"), nil
}

// NewZooKeeper starts a standalone ZooKeeper server for the calling test
// alone, to inject faults into; it is torn down when the test ends. Sessions
// may time out between 1 s and 60 s.
func NewZooKeeper(t testing.TB) *Server {
	t.Helper()
	requireMain(t)
	k := newZKKind()
	if k == nil {
		unavailable(t, noBinaryMsg("NewZooKeeper", "ZooKeeper (java and /usr/share/java/zookeeper.jar)", "zookeeper"))
	}
	s, err := launch(k, "zookeeper", 1)
	if err != nil {
		t.Fatal(err)
	}
	dedicated(t, s)
	return s
}

// Where Debian's zookeeper package puts its jars. zookeeper.jar's manifest
// names the rest of its classpath (jute, slf4j-api, netty, …); the log4j
// binding is ours to add.
const javaDir = "/usr/share/java"

type zkKind struct {
	java      string
	classpath string
}

func newZKKind() *zkKind {
	java := findBinary("java", "/usr/bin/java")
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

func (*zkKind) prepare(ctx context.Context, s *Server) error { return writeZKConfig(s, "") }

// writeZKConfig writes zoo.cfg, with extra appended (an ensemble member's
// server lines), and log4j.properties into s's directory.
func writeZKConfig(s *Server, extra string) error {
	if err := os.MkdirAll(s.dataDir(), 0o755); err != nil {
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
`, s.dataDir(), s.port) + extra
	const log4j = `log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
`
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "log4j.properties"), []byte(log4j), 0o644)
}

func (k *zkKind) command(s *Server) (*exec.Cmd, error) {
	cmd := exec.Command(k.java,
		"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-XX:-UsePerfData", // no /tmp/hsperfdata_* file left by a killed JVM
		"-Dlog4j.configuration=file:"+filepath.Join(s.dir, "log4j.properties"),
		"-Dzookeeper.log.dir="+s.dir,
		"-cp", k.classpath,
		"org.apache.zookeeper.server.quorum.QuorumPeerMain",
		filepath.Join(s.dir, "zoo.cfg"),
	)
	cmd.Dir = s.dir // shows as user.dir in "envi": how probe recognises its server
	return cmd, nil
}

// probe: "ruok" answers before the server serves; "srvr" has a Mode: line only
// once it does. "envi" tells whether it is our process that answers.
func (*zkKind) probe(s *Server, pid int) (func(context.Context) error, func()) {
	return func(ctx context.Context) error { return zkProbe(ctx, s) }, func() {}
}

func zkProbe(ctx context.Context, s *Server) error {
	if _, err := zkwire.Mode(ctx, s.Addr()); err != nil {
		return err
	}
	env, err := zkwire.FourLetter(ctx, s.Addr(), "envi")
	if err != nil {
		return err
	}
	if !strings.Contains(env, "user.dir="+s.dir+"\n") {
		return fmt.Errorf("%w: another ZooKeeper answers on %s", errPortTaken, s.Addr())
	}
	return nil
}

func (*zkKind) stopSignal() syscall.Signal { return syscall.SIGTERM }
func (*zkKind) gracefulTeardown() bool     { return false }
func (*zkKind) canWipe(*Server) error      { return nil }

// zkDo runs fn on a fresh session that is closed afterwards.
func zkDo(addrs []string, fn func(context.Context, *zkwire.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := zkwire.Dial(ctx, addrs, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// zkCreateChroot creates chroot and its parents.
func zkCreateChroot(addrs []string, chroot string) error {
	if err := zkDo(addrs, func(ctx context.Context, c *zkwire.Conn) error { return c.CreateAll(ctx, chroot) }); err != nil {
		return fmt.Errorf("servers: creating chroot %s: %w", chroot, err)
	}
	return nil
}
