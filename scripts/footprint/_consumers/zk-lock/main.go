// Peer: go-zookeeper's own zk.Lock.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/go-zookeeper/zk"
)

func main() {
	c, _, err := zk.Connect([]string{os.Getenv("ZK")}, 15*time.Second)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	l := zk.NewLock(c, "/lock/sku:42", zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		panic(err)
	}
	fmt.Println("locked")
	if err := l.Unlock(); err != nil {
		panic(err)
	}
}
