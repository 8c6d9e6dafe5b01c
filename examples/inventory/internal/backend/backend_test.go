package backend

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/harness/pgserver"
)

func TestMain(m *testing.M) { harness.Main(m) }

func TestLockConfigArgsRoundTrip(t *testing.T) {
	for _, c := range []LockConfig{
		{Kind: Etcd, Etcd: []string{"127.0.0.1:1", "127.0.0.1:2"}, Prefix: "/p/"},
		{Kind: Redis, Redis: "127.0.0.1:6379"},
		{Kind: Redlock, Redlock: []string{"a:1", "b:2", "c:3"}},
		{Kind: ZooKeeper, ZK: []string{"z:2181"}},
	} {
		var got LockConfig
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		got.RegisterFlags(fs)
		if err := fs.Parse(c.Args()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v gave %+v", c, got)
		}
		if err := got.Validate(true); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := (LockConfig{Kind: Etcd}).Validate(false); err != nil {
		t.Errorf("etcd without endpoints where an embedded one stands in: %v", err)
	}
}

func TestOpenStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	t.Run("memory", func(t *testing.T) {
		s, err := OpenStore(ctx, StoreConfig{Mode: StoreMemory}, log)
		if err != nil || !strings.Contains(s.Desc, "memory") {
			t.Fatalf("%+v, %v", s, err)
		}
		s.Close()
	})
	t.Run("url", func(t *testing.T) {
		pg := pgserver.Shared(t)
		s, err := OpenStore(ctx, StoreConfig{URL: pg.DSN}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !strings.HasPrefix(s.Desc, "PostgreSQL ") || s.Notice != "" {
			t.Fatalf("desc %q, notice %q", s.Desc, s.Notice)
		}
		if _, err := s.Put(ctx, "lamp", 3); err != nil {
			t.Fatal(err)
		}
	})
	// Auto without a URL: a throwaway local server, gone after Close.
	t.Run("throwaway", func(t *testing.T) {
		s, err := OpenStore(ctx, StoreConfig{Mode: StorePostgres}, log)
		if err != nil {
			if os.Getenv(harness.EnvRequireServers) != "1" {
				t.Skipf("no local PostgreSQL: %v", err)
			}
			t.Fatal(err)
		}
		i := strings.Index(s.Desc, "/tmp/")
		if i < 0 {
			s.Close()
			t.Fatalf("desc %q names no directory", s.Desc)
		}
		dir := s.Desc[i:]
		if _, err := s.Put(ctx, "lamp", 3); err != nil {
			t.Error(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s left behind (%v)", dir, err)
		}
	})
	// A mysql:// URL is MySQL's, whatever the mode says (the demo's and
	// serve's tests open MySQL stores both ways).
	if _, err := OpenStore(ctx, StoreConfig{Mode: StorePostgres, URL: "mysql://app:pw@127.0.0.1:1/shop"}, log); err == nil ||
		!strings.Contains(err.Error(), "--store=mysql") {
		t.Errorf("--store=postgres with a mysql:// URL: %v", err)
	}
	if _, err := OpenStore(ctx, StoreConfig{Mode: "sqlite"}, log); err == nil {
		t.Error("unknown mode accepted")
	}
}

func TestMySQLConfig(t *testing.T) {
	for _, c := range []struct {
		in                        string
		user, pass, addr, db, ipp string // ipp: interpolateParams, "" for false
	}{
		{"mysql://app:s%40cr%3At@db.example:3307/shop", "app", "s@cr:t", "db.example:3307", "shop", "true"},
		{"MySQL://app@db/shop?interpolateParams=false&timeout=5s", "app", "", "db:3306", "shop", ""},
		{"mysql://root:pw@[::1]/my%20db", "root", "pw", "[::1]:3306", "my db", "true"},
		{"app:pw@tcp(127.0.0.1:3306)/shop?parseTime=true", "app", "pw", "127.0.0.1:3306", "shop", ""},
	} {
		cfg, err := MySQLConfig(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		ipp := ""
		if cfg.InterpolateParams {
			ipp = "true"
		}
		if cfg.User != c.user || cfg.Passwd != c.pass || cfg.Addr != c.addr || cfg.DBName != c.db || ipp != c.ipp {
			t.Errorf("%s: user %q pass %q addr %q db %q interpolateParams %v", c.in, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName, cfg.InterpolateParams)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "no database URL"},
		{"postgres://app:secret@db/shop", "postgres:// URL is not MySQL's"},
		{"mysql://app:secret@/shop", "names no host"},
		{"mysql://app:secret@db", "must name one database"},
		{"mysql://app:secret@db/", "must name one database"},
		{"mysql://app:secret@db/a/b", "must name one database"},
		{"mysql://app:secret@db:port/shop", "bad database URL"},
		{"mysql://app:secret@db/shop?timeout=soon", "parameters"},
		{"app:secret@db/shop", "data source name"},
		{"app:secret@tcp(db)/", "names no database"},
	} {
		_, err := MySQLConfig(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.in, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: the error repeats the password: %v", c.in, err)
		}
	}
}
