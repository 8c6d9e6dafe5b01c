// Consumer: fenceguard's etcd locker and guard.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks/etcdlock"
	"github.com/fenceguard/fenceguard/token"
)

func main() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv("ETCD")}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	locker, err := etcdlock.New(cli, etcdlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	g, err := guard.New(locker, guard.Options{TTL: 15 * time.Second})
	if err != nil {
		panic(err)
	}
	err = g.Do(context.Background(), "sku:42", func(ctx context.Context, t token.Token) error {
		fmt.Println("token", t)
		return nil
	})
	if err != nil {
		panic(err)
	}
}
