module github.com/fenceguard/fenceguard

go 1.25.0

require (
	github.com/fenceguard/fenceguard/harness v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

replace github.com/fenceguard/fenceguard/harness => ./harness
