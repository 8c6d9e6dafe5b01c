package boundedstate

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fenceguard/fenceguard/harness/zkserver"
	"github.com/fenceguard/fenceguard/locks/zklock"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// zklock keeps one znode per key, a container, which the server deletes
// once its last child is gone: with the container check every 200ms (a
// minute by ZooKeeper's default), the key znodes go back to none and the
// server's znode count to its baseline.
func TestZklockKeyZnodesGoWithTheirLastChild(t *testing.T) {
	srv := zkserver.NewWith(t, zkserver.Options{ContainerCheck: 200 * time.Millisecond, ContainerRate: 1_000_000})
	const prefix = "/lock"
	l, err := zklock.New([]string{srv.Addr()}, zklock.Options{Prefix: prefix, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	c, events, err := zk.Connect([]string{srv.Addr()}, ttl, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for range events {
		}
	})
	before := warmUp(t, l)
	keyZnodes := func() int {
		_, st, err := c.Exists(prefix)
		if err != nil {
			t.Fatal(err)
		}
		return int(st.NumChildren)
	}
	znodes := func() int {
		n, err := znodeCount(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitNoKeys := func() bool {
		deadline := time.Now().Add(20 * time.Second)
		for keyZnodes() > 0 {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(100 * time.Millisecond)
		}
		return true
	}
	if !waitNoKeys() {
		t.Fatalf("%d key znodes left 20s after the warm-up's last release", keyZnodes())
	}
	base := znodes()
	lockKeys(t, l, "key", distinct)
	checkProcess(t, l, before)
	kids, _, err := c.Children(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d key znodes right after the last release", len(kids))
	if !waitNoKeys() {
		t.Errorf("%d key znodes left 20s after the last release", keyZnodes())
	}
	if n := znodes(); n != base {
		t.Errorf("server holds %d znodes, %d before %d distinct keys", n, base, distinct)
	}
}

// znodeCount is the server's zk_znode_count (mntr).
func znodeCount(addr string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("mntr")); err != nil {
		return 0, err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "zk_znode_count"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("mntr on %s has no zk_znode_count: %q", addr, out)
}
