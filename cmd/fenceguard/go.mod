module github.com/fenceguard/fenceguard/cmd/fenceguard

go 1.26.0

replace (
	github.com/fenceguard/fenceguard => ../..
	github.com/fenceguard/fenceguard/harness => ../../harness
	github.com/fenceguard/fenceguard/harness/etcdserver => ../../harness/etcdserver
	github.com/fenceguard/fenceguard/locks/etcdlock => ../../locks/etcdlock
	github.com/fenceguard/fenceguard/locks/redislock => ../../locks/redislock
	github.com/fenceguard/fenceguard/locks/zklock => ../../locks/zklock
	github.com/fenceguard/fenceguard/storage/postgres => ../../storage/postgres
)

require (
	github.com/fenceguard/fenceguard/harness v0.0.0-00010101000000-000000000000
	github.com/spf13/cobra v1.10.2
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)
