package etcdembed_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdembed"
)

// Close must stop every goroutine the embedded server started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func put(t *testing.T, eps []string, key, val string) {
	t.Helper()
	cli := client(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, key, val); err != nil {
		t.Fatalf("put: %v", err)
	}
}

func get(t *testing.T, eps []string, key string) (string, bool) {
	t.Helper()
	cli := client(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	return string(resp.Kvs[0].Value), true
}

func client(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestStartServeClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := etcdembed.Start(ctx, etcdembed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s.Endpoints(), "k", "v")
	if v, ok := get(t, s.Endpoints(), "k"); !ok || v != "v" {
		t.Fatalf("get k = %q, %v; want v", v, ok)
	}
	dir := s.TempDirForTest()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("temp dir %s still there after Close (stat err %v)", dir, err)
	}
}

func TestGivenDirKeepsData(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := t.TempDir()
	s, err := etcdembed.Start(ctx, etcdembed.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	put(t, s.Endpoints(), "k", "kept")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Close removed the caller's dir: %v", err)
	}
	s, err = etcdembed.Start(ctx, etcdembed.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok := get(t, s.Endpoints(), "k"); !ok || v != "kept" {
		t.Fatalf("after restart get k = %q, %v; want kept", v, ok)
	}
}

func TestStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := etcdembed.Start(ctx, etcdembed.Options{})
	if err == nil {
		s.Close()
		t.Skip("server was ready before the cancelled context was noticed")
	}
}
