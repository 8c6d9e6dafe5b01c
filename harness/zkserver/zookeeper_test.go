package zkserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

func TestZooKeeperSharedChroots(t *testing.T) {
	t.Parallel()
	var got []*DB
	for _, name := range []string{"a", "b"} {
		t.Run(name, func(t *testing.T) {
			z := Shared(t)
			c := zkConn(t, z.Addrs)
			// Nested nodes: the cleanup deletes recursively.
			if err := createAll(c, z.Chroot+"/k/deeper/still"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Create(z.Chroot+"/v", []byte(name), 0, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatal(err)
			}
			data, _, err := c.Get(z.Chroot + "/v")
			if err != nil || string(data) != name {
				t.Fatalf("get = %q, %v; want %q", data, err, name)
			}
			got = append(got, z)
		})
	}
	if len(got) != 2 {
		t.Fatal("subtests failed")
	}
	if got[0].Chroot == got[1].Chroot || !strings.HasPrefix(got[0].Chroot, "/fg/") {
		t.Fatalf("chroots %q and %q: want distinct /fg/… paths", got[0].Chroot, got[1].Chroot)
	}
	c := zkConn(t, got[0].Addrs)
	for _, z := range got {
		if ok, _, err := c.Exists(z.Chroot); err != nil || ok {
			t.Fatalf("chroot %s still exists after its test (%v)", z.Chroot, err)
		}
	}
}

func TestZooKeeperFaults(t *testing.T) {
	t.Parallel()
	s := New(t)
	srvr := func(d time.Duration) error {
		ctx, cancel := ctxFor(d)
		defer cancel()
		_, err := mode(ctx, s.Addr())
		return err
	}
	c := zkConn(t, []string{s.Addr()})
	if _, err := c.Create("/kept", []byte("v"), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}

	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := srvr(300 * time.Millisecond); err == nil {
		t.Fatal("srvr answered while the server was paused")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "srvr after Resume", func() error { return srvr(time.Second) })

	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srvr(300 * time.Millisecond); err == nil {
		t.Fatal("srvr answered after Kill")
	}
	if err := s.Start(false); err != nil {
		t.Fatal(err)
	}
	c2 := zkConn(t, []string{s.Addr()})
	data, _, err := c2.Get("/kept")
	if err != nil || string(data) != "v" {
		t.Fatalf("after Kill+Start(false) /kept = %q, %v; want v", data, err)
	}
}

// With a short container check, an emptied container znode goes within
// moments, where ZooKeeper's default check would keep it a minute.
func TestNewWithContainerCheck(t *testing.T) {
	t.Parallel()
	s := NewWith(t, Options{ContainerCheck: 100 * time.Millisecond, ContainerRate: 1_000_000})
	c := zkConn(t, []string{s.Addr()})
	acl := zk.WorldACL(zk.PermAll)
	if _, err := c.CreateContainer("/box", nil, zk.FlagContainer, acl); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create("/box/item", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // checks that pass while it has a child keep it
	if ok, _, err := c.Exists("/box"); err != nil || !ok {
		t.Fatalf("container with a child: exists %v, %v", ok, err)
	}
	if err := c.Delete("/box/item", -1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the emptied container deleted", func() error {
		ok, _, err := c.Exists("/box")
		if err == nil && ok {
			err = errors.New("still there")
		}
		return err
	})
}
