module github.com/fenceguard/fenceguard/locks/zklock

go 1.25.0

require (
	github.com/fenceguard/fenceguard v0.0.0-00010101000000-000000000000
	github.com/fenceguard/fenceguard/harness v0.0.0-00010101000000-000000000000
	github.com/go-zookeeper/zk v1.0.4
)

require go.uber.org/goleak v1.3.0 // indirect

replace (
	github.com/fenceguard/fenceguard => ../..
	github.com/fenceguard/fenceguard/harness => ../../harness
)
