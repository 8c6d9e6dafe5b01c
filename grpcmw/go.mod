module github.com/fenceguard/fenceguard/grpcmw

go 1.25.0

require (
	github.com/fenceguard/fenceguard v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.48.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.10
)

require (
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
)

replace (
	github.com/fenceguard/fenceguard => ..
	github.com/fenceguard/fenceguard/harness => ../harness
)
