package etcdembed_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fenceguard/fenceguard/harness/etcdembed"
)

func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "greeting", "hello"); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := cli.Get(ctx, "greeting")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(resp.Kvs[0].Value))
	// Output: hello
}
