package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdserver"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

// A resource fenced by an etcd Fence refuses, with the sequencer check,
// every token above the lock's current grant: a client that makes up a
// token can at worst act as the current holder, never lock out the holders
// queued behind it.
func ExampleNewSequencer() {
	ctx := context.Background()
	etcd := etcdserver.Example() // the test's etcd; yours is your cluster's endpoints
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints, Logger: zap.NewNop()})
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
