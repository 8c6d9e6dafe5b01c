package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZK is a test's share of a ZooKeeper ensemble: its own chroot, created for
// it and deleted (with everything below) when the test ends. go-zookeeper
// takes no chroot in its server list: put Chroot in front of every path.
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
	if err := zkDo(sh.addrs, func(c *zk.Conn) error { return zkCreateAll(c, chroot) }); err != nil {
		t.Fatalf("servers: creating chroot %s: %v", chroot, err)
	}
	t.Cleanup(func() {
		if err := zkDo(sh.addrs, func(c *zk.Conn) error { return zkDeleteAll(c, chroot) }); err != nil {
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
	if dockerAvailable() {
		addr, err := zookeeperContainer()
		return zkShared{addrs: []string{addr}}, "", err
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
	return func(ctx context.Context) error {
		out, err := fourLetter(ctx, s.Addr(), "srvr")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Mode: ") {
			return fmt.Errorf("srvr: not serving yet: %q", out)
		}
		env, err := fourLetter(ctx, s.Addr(), "envi")
		if err != nil {
			return err
		}
		if !strings.Contains(env, "user.dir="+s.dir+"\n") {
			return fmt.Errorf("%w: another ZooKeeper answers on %s", errPortTaken, s.Addr())
		}
		return nil
	}, func() {}
}

func (*zkKind) stopSignal() syscall.Signal { return syscall.SIGTERM }
func (*zkKind) gracefulTeardown() bool     { return false }
func (*zkKind) canWipe(*Server) error      { return nil }

// fourLetter sends a ZooKeeper four-letter command and returns the answer.
func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() }) // unblock reads when ctx ends
	defer stop()
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(conn))
	return string(b), err
}

// zkDo runs fn on a fresh, quiet connection that is closed afterwards.
func zkDo(addrs []string, fn func(*zk.Conn) error) error {
	c, events, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	defer c.Close()
	timeout := time.After(15 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-events:
		case <-timeout:
			return fmt.Errorf("no ZooKeeper session with %v", addrs)
		}
	}
	return fn(c)
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// zkCreateAll creates p and its missing parents.
func zkCreateAll(c *zk.Conn, p string) error {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		_, err := c.Create(cur, nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// zkDeleteAll deletes p and everything below it.
func zkDeleteAll(c *zk.Conn, p string) error {
	children, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ch := range children {
		if err := zkDeleteAll(c, path.Join(p, ch)); err != nil {
			return err
		}
	}
	if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}
