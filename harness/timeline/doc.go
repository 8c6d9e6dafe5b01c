// Package timeline draws what lock holders did over time as an SVG picture:
// one panel per run, a lane per client with its leases and their tokens, the
// faults injected (a frozen process, a server down), the moment a lease passed
// to another client, every access the resource accepted or refused, the one
// access the picture is about (a stale holder's late write), and a value over
// time (the stock of an item).
//
// It knows nothing of where the events came from: the inventory demo
// (examples/inventory) and the fault-injection suite (integration/faults)
// each turn their own records into a [Chart] and call [Write].
//
// Everything is plain data; [Write] is safe for concurrent use.
package timeline
