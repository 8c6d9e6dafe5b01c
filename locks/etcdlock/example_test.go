package etcdlock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

// A nightly job that several instances run: each runs it under the same
// etcd lock with guard.Do, and its writes claim an etcd Fence with the
// lease's token, so that an instance paused past its lease is refused once
// the next one has written. It runs as written against the etcd at
// ETCD_ENDPOINTS (comma-separated, default 127.0.0.1:2379); this package's
// tests point ETCD_ENDPOINTS at their own.
func Example() {
	ctx := context.Background()
	endpoints := strings.Split(cmp.Or(os.Getenv("ETCD_ENDPOINTS"), "127.0.0.1:2379"), ",")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      etcdlock.ClientLogger(slog.Default()),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	locker, err := etcdlock.New(cli, etcdlock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	g, err := guard.New(locker, guard.Options{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// The resource's side. etcd's tokens are revisions, far below the
	// clock: the sequencer check bounds made-up ones.
	fence := etcdlock.NewFence(cli, etcdlock.FenceOptions{
		Check: token.SequencerCheck(etcdlock.NewSequencer(cli, ""), token.SequencerOptions{}),
	})
	export := func(ctx context.Context, t token.Token) error {
		if err := fence.Claim(ctx, "report:nightly", t); err != nil {
			return err
		}
		return nil // ... write the report, passing t along ...
	}

	var first token.Token
	err = g.Do(ctx, "job:nightly", func(ctx context.Context, t token.Token) error {
		first = t
		return export(ctx, t)
	})
	fmt.Println("first instance:", err)
	err = g.Do(ctx, "job:nightly", func(ctx context.Context, t token.Token) error {
		fmt.Println("next grant's token is higher:", t > first)
		return export(ctx, t)
	})
	fmt.Println("second instance:", err)

	// The first instance, had it been frozen all this time, wakes up:
	err = export(ctx, first)
	fmt.Println("first instance, late, refused:", errors.Is(err, token.ErrStale))
	// Output:
	// first instance: <nil>
	// next grant's token is higher: true
	// second instance: <nil>
	// first instance, late, refused: true
}

// A resource fenced by an etcd Fence refuses, with the sequencer check,
// every token above the lock's current grant: a client that makes up a
// token can at worst act as the current holder, never lock out the holders
// queued behind it. It runs against the etcd at ETCD_ENDPOINTS (default
// 127.0.0.1:2379).
func ExampleNewSequencer() {
	ctx := context.Background()
	endpoints := strings.Split(cmp.Or(os.Getenv("ETCD_ENDPOINTS"), "127.0.0.1:2379"), ",")
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	locker, err := etcdlock.New(cli, etcdlock.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	// The resource's side: the same prefix as the lockers' (here both the
	// default), and the lock key is the resource key.
	fence := etcdlock.NewFence(cli, etcdlock.FenceOptions{
		Check: token.SequencerCheck(etcdlock.NewSequencer(cli, ""), token.SequencerOptions{}),
	})

	lease, err := locker.Acquire(ctx, "sku:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holder:", fence.Claim(ctx, "sku:42", lease.Token()))
	issued, err := locker.Issued(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	err = fence.Claim(ctx, "sku:42", issued+1000)
	fmt.Println("made-up token refused:", errors.Is(err, token.ErrForged))
	// Output:
	// holder: <nil>
	// made-up token refused: true
}

// An operator puts back a mark that a forged token poisoned (from before
// the sequencer check was in place): to the token of the lock's current
// grant, so its holder and every later one get through and every earlier
// one is still refused. (Not run: it needs an etcd cluster.)
func ExampleFence_Reset() {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	fence := etcdlock.NewFence(cli, etcdlock.FenceOptions{})
	cur, err := etcdlock.NewSequencer(cli, "").Current(ctx, "sku:42")
	if err != nil {
		log.Fatal(err)
	}
	prev, err := fence.Reset(ctx, "sku:42", cur) // logged at Warn level
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sku:42: mark %d reset to %d\n", prev, cur)
}
