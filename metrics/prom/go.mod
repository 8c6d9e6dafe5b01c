module github.com/fenceguard/fenceguard/metrics/prom

go 1.25.0

require (
	github.com/fenceguard/fenceguard v0.0.0-00010101000000-000000000000
	github.com/fenceguard/fenceguard/harness v0.0.0-00010101000000-000000000000
	github.com/prometheus/client_golang v1.19.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/prometheus/client_model v0.5.0 // indirect
	github.com/prometheus/common v0.48.0 // indirect
	github.com/prometheus/procfs v0.12.0 // indirect
	golang.org/x/sys v0.17.0 // indirect
	google.golang.org/protobuf v1.33.0 // indirect
)

replace github.com/fenceguard/fenceguard => ../..

replace github.com/fenceguard/fenceguard/harness => ../../harness
