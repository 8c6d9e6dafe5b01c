package zklockbench_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// benchServer starts a standalone ZooKeeper 3.8 from the Debian jars for the
// calling benchmark, with fsync on (forceSync=yes, the default): the
// harness's servers run with forceSync=no, which would flatter every write.
// Its data directory is on the benchmark's temp dir; it is killed at the
// end, and by the kernel should the benchmark binary die.
func benchServer(b *testing.B) string {
	b.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		b.Skip("benchmarks need java and the zookeeper package's jars: apt-get install zookeeper")
	}
	const jars = "/usr/share/java"
	cp := []string{filepath.Join(jars, "zookeeper.jar"), filepath.Join(jars, "slf4j-log4j12.jar"), filepath.Join(jars, "log4j-1.2.jar")}
	for _, j := range cp {
		if _, err := os.Stat(j); err != nil {
			b.Skipf("benchmarks need %s: apt-get install zookeeper", j)
		}
	}
	dir := b.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cfg := fmt.Sprintf("tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\ndataDir=%s\n"+
		"clientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=srvr\nforceSync=yes\nmaxClientCnxns=0\n",
		filepath.Join(dir, "data"), port)
	if err := os.WriteFile(filepath.Join(dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	log4j := "log4j.rootLogger=WARN, F\nlog4j.appender.F=org.apache.log4j.FileAppender\n" +
		"log4j.appender.F.File=" + filepath.Join(dir, "server.log") + "\nlog4j.appender.F.layout=org.apache.log4j.PatternLayout\n"
	if err := os.WriteFile(filepath.Join(dir, "log4j.properties"), []byte(log4j), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:-UsePerfData",
		"-Dlog4j.configuration=file:"+filepath.Join(dir, "log4j.properties"),
		"-cp", strings.Join(cp, ":"),
		"org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(dir, "zoo.cfg"))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(time.Minute); !srvr(addr); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("ZooKeeper on %s not serving after a minute; see %s", addr, filepath.Join(dir, "server.log"))
		}
	}
	warmUp(b, addr)
	return addr
}

// warmUp runs the requests the peers use, alone and contended, until the
// JVM has compiled their paths, so that no peer pays for it.
func warmUp(b *testing.B, addr string) {
	var wg sync.WaitGroup
	for range 8 {
		c := benchConn(b, addr, 10*time.Second)
		wg.Go(func() {
			for range 250 {
				m := zk.NewLock(c, "/warm-contended", zk.WorldACL(zk.PermAll))
				if err := m.Lock(); err != nil {
					b.Error(err)
					return
				}
				_ = m.Unlock()
			}
		})
	}
	wg.Wait()
	c := benchConn(b, addr, 10*time.Second)
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.Create("/warm", nil, 0, acl); err != nil {
		b.Fatal(err)
	}
	for range 2000 {
		res, err := c.Multi(
			&zk.CreateRequest{Path: "/warm/n-", Acl: acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: "/warm", Version: -1},
		)
		if err != nil {
			b.Fatal(err)
		}
		p, err := c.Create("/warm/m-", nil, zk.FlagEphemeralSequential, acl)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Children("/warm"); err != nil {
			b.Fatal(err)
		}
		if _, _, _, err := c.GetW(p); err != nil {
			b.Fatal(err)
		}
		for _, p := range []string{res[0].String, p} {
			if err := c.Delete(p, -1); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func srvr(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return false
	}
	out, _ := io.ReadAll(c)
	return strings.Contains(string(out), "Mode: ")
}
