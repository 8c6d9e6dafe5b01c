// Package prom exports fenceguard's metrics to Prometheus: the holder side
// from a guard's events ([Metrics.Observe] as guard.Options.Observer), the
// resource side from claims ([Metrics.Fence] wraps any token.Fence;
// [Metrics.Check] wraps a token.Check that runs before one, such as
// httpmw's; [Metrics.Claim] records an enforcer's own checks), and the
// HTTP middleware's every decision ([Metrics.HTTP] as
// httpmw.Options.Observe), the refusals no Fence or Check sees included:
// a missing, malformed or too long header — and the gRPC interceptors'
// ([Metrics.GRPC], called from grpcmw.Options.Observe with plain strings,
// so that grpc stays out of this module).
//
// # Label cardinality
//
// Lock and resource keys are never labels. [Options.Class] maps a key to a
// class — "sku", "payment", a route — and at most [Options.MaxClasses]
// distinct classes are exported; the rest are counted under "other". The
// default class is "default" for everything. Per-key high-water gauges
// exist only for the resources [Options.TrackHighWater] selects.
//
// # Metrics
//
// With the default namespace "fenceguard":
//
//	fenceguard_acquire_wait_seconds{class}        histogram: Acquire call to grant (uncontended: its latency)
//	fenceguard_acquisitions_total{class}          counter
//	fenceguard_acquire_failures_total{class}      counter: Acquire gave up
//	fenceguard_renewals_total{class}              counter
//	fenceguard_renew_seconds{class}               histogram: one renewal's round trip
//	fenceguard_renewal_failures_total{class}      counter: failed, not refused (server unreachable)
//	fenceguard_leases_lost_total{class,cause}     counter: cause refused|deadline|other
//	fenceguard_releases_total{class}              counter
//	fenceguard_release_failures_total{class}      counter
//	fenceguard_lease_hold_seconds{class}          histogram: grant to release or loss
//	fenceguard_leases_held{class}                 gauge
//	fenceguard_claims_total{class,result}         counter: result accepted|stale|forged|invalid|error
//	fenceguard_http_requests_total{class,result}  counter: result accepted|unfenced|missing|invalid|no_resource|forged|stale|unavailable; class "none" before the key is known
//	fenceguard_grpc_calls_total{class,result}     counter: the same results and classes, for grpcmw
//	fenceguard_high_water{resource}               gauge: only for tracked resources
//
// A Metrics is safe for concurrent use.
package prom
