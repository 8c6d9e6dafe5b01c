module github.com/fenceguard/fenceguard/locks/redislock

go 1.25.0

require (
	github.com/fenceguard/fenceguard v0.0.0-00010101000000-000000000000
	github.com/fenceguard/fenceguard/harness v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.0.5
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
)

replace (
	github.com/fenceguard/fenceguard => ../..
	github.com/fenceguard/fenceguard/harness => ../../harness
)
