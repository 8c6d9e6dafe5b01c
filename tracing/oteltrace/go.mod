module github.com/fenceguard/fenceguard/tracing/oteltrace

go 1.25.0

require (
	github.com/fenceguard/fenceguard v0.0.0-00010101000000-000000000000
	go.opentelemetry.io/otel v1.24.0
	go.opentelemetry.io/otel/sdk v1.24.0
	go.opentelemetry.io/otel/trace v1.24.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/go-logr/logr v1.4.1 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	go.opentelemetry.io/otel/metric v1.24.0 // indirect
	golang.org/x/sys v0.17.0 // indirect
)

replace github.com/fenceguard/fenceguard => ../..

replace github.com/fenceguard/fenceguard/harness => ../../harness
