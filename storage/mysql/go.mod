module github.com/fenceguard/fenceguard/storage/mysql

go 1.25.0

require (
	github.com/fenceguard/fenceguard v0.0.0-00010101000000-000000000000
	github.com/fenceguard/fenceguard/harness v0.0.0-00010101000000-000000000000
	github.com/go-sql-driver/mysql v1.10.2
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)

replace (
	github.com/fenceguard/fenceguard => ../..
	github.com/fenceguard/fenceguard/harness => ../../harness
)
