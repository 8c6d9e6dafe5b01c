// Peer: etcd's own concurrency.Mutex.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func main() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Getenv("ETCD")}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(15))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "/lock/sku:42")
	ctx := context.Background()
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("revision", m.Header().Revision)
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
}
