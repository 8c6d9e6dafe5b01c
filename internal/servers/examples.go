package servers

import (
	"flag"
	"fmt"
	"os"
	"strconv"
)

// Kind names a kind of shared server, for [ExamplesNeed].
type Kind string

// The kinds of shared servers Example functions can ask for.
const (
	KindEtcd      Kind = "etcd"
	KindRedis     Kind = "redis"
	KindPostgres  Kind = "postgres"
	KindZooKeeper Kind = "zookeeper"
)

var exampleKinds []Kind // set before Main, read by Main

// ExamplesNeed declares the shared servers the package's Example functions
// use. Call it from TestMain, before [Main]:
//
//	func TestMain(m *testing.M) {
//		servers.ExamplesNeed(servers.KindEtcd)
//		servers.Main(m)
//	}
//
// An Example gets no *testing.T and so cannot skip: Main therefore starts
// these servers before any test runs, and when one of them is not
// available it skips every Example of the package (go test's -test.skip)
// with the message a test would have skipped with — or, under
// FENCEGUARD_REQUIRE_SERVERS=1, fails the package. The examples then reach
// the servers with [ExampleEtcd], [ExampleRedis], [ExamplePostgres] and
// [ExampleZooKeeper].
func ExamplesNeed(kinds ...Kind) { exampleKinds = append(exampleKinds, kinds...) }

// prepareExamples starts the servers the examples need, or skips the
// examples. A non-nil error fails the package.
func prepareExamples() error {
	for _, k := range exampleKinds {
		skip, err := warmShared(k)
		if err != nil {
			return fmt.Errorf("servers: a %s server for the examples: %w", k, err)
		}
		if skip == "" {
			continue
		}
		if os.Getenv(EnvRequireServers) == "1" {
			return fmt.Errorf("%s (failing instead of skipping the examples: %s=1)", skip, EnvRequireServers)
		}
		if !flag.Parsed() {
			flag.Parse()
		}
		pat := "^Example"
		if cur := flag.Lookup("test.skip"); cur != nil && cur.Value.String() != "" {
			pat = cur.Value.String() + "|" + pat
		}
		if err := flag.Set("test.skip", pat); err != nil {
			return fmt.Errorf("servers: skipping the examples: %w", err)
		}
		fmt.Fprintf(os.Stderr, "servers: skipping this package's examples: %s\n", skip)
		return nil
	}
	return nil
}

func warmShared(k Kind) (skip string, err error) {
	switch k {
	case KindEtcd:
		_, skip, err = sharedEtcd.load(startSharedEtcd)
	case KindPostgres:
		_, skip, err = sharedPG.load(startSharedPG)
	case KindZooKeeper:
		_, skip, err = sharedZK.load(startSharedZK)
	case KindRedis:
		_, _, skip, err = sharedRedis.load(1)
	default:
		err = fmt.Errorf("unknown kind %q", k)
	}
	return skip, err
}

// exampleUnavailable is what an example gets for a server its package did
// not declare with ExamplesNeed, or that failed: a panic fails the example
// with the reason.
func exampleUnavailable(k Kind, skip string, err error) {
	if err == nil {
		err = fmt.Errorf("%s (declare it with servers.ExamplesNeed(servers.Kind%s) in TestMain)", skip, k)
	}
	panic(fmt.Sprintf("servers: no %s server for this example: %v", k, err))
}

// exampleNamespace names an example's share of a shared server.
func exampleNamespace() string {
	if !mainCalled.Load() {
		panic("servers: an example's package must call servers.Main(m) from TestMain")
	}
	return runID + "-" + strconv.FormatInt(seq.Add(1), 10) + "-example"
}

// ExampleEtcd returns the package's shared etcd server with a key prefix
// of the calling example's own. The keys stay until the server goes at the
// end of the package (an etcd from the environment keeps them).
func ExampleEtcd() *EtcdDB {
	sh, skip, err := sharedEtcd.load(startSharedEtcd)
	if skip != "" || err != nil {
		exampleUnavailable(KindEtcd, skip, err)
	}
	return &EtcdDB{Endpoints: append([]string(nil), sh.endpoints...), Prefix: "/fg/" + exampleNamespace() + "/", Server: sh.server}
}

// ExampleRedis returns the package's shared Redis server with a key
// prefix of the calling example's own, kept like ExampleEtcd's.
func ExampleRedis() *RedisDB {
	addrs, srvs, skip, err := sharedRedis.load(1)
	if skip != "" || err != nil {
		exampleUnavailable(KindRedis, skip, err)
	}
	return &RedisDB{Addr: addrs[0], Prefix: "fg:" + exampleNamespace() + ":", Server: srvs[0]}
}

// ExamplePostgres returns a fresh database for the calling example on the
// package's shared PostgreSQL server. It is dropped with the server at the
// end of the package (on a server from the environment it stays).
func ExamplePostgres() *PG {
	_ = exampleNamespace() // checks Main
	sh, skip, err := sharedPG.load(startSharedPG)
	if skip != "" || err != nil {
		exampleUnavailable(KindPostgres, skip, err)
	}
	pg, err := createDatabase(sh)
	if err != nil {
		exampleUnavailable(KindPostgres, "", err)
	}
	return pg
}

// ExampleZooKeeper returns the package's shared ZooKeeper server with a
// chroot of the calling example's own, kept like ExampleEtcd's keys.
func ExampleZooKeeper() *ZK {
	sh, skip, err := sharedZK.load(startSharedZK)
	if skip != "" || err != nil {
		exampleUnavailable(KindZooKeeper, skip, err)
	}
	chroot := "/fg/" + exampleNamespace()
	if err := zkCreateChroot(sh.addrs, chroot); err != nil {
		exampleUnavailable(KindZooKeeper, "", err)
	}
	return &ZK{Addrs: append([]string(nil), sh.addrs...), Chroot: chroot, Server: sh.server}
}
