// Package service is the inventory HTTP service: items with a stock, read and
// written by lock holders under fencing, plus the unfenced administration
// routes, health and metrics. [New] builds the routes as one http.Handler;
// the caller owns the http.Server around it.
//
// # Routes
//
//	GET  /items/{sku}         read an item; with X-Fencing-Token it claims the item first
//	PUT  /items/{sku}/stock   {"stock": n}; fenced: needs X-Fencing-Token
//	POST /items/{sku}/sell    sell one unit (204; 409 sold-out at 0); fenced: needs X-Fencing-Token
//	GET  /admin/items/{sku}   read an item and its high-water mark, claiming nothing
//	PUT  /admin/items/{sku}   {"stock": n}; create or overwrite, unfenced
//	GET  /healthz             200 when the store answers
//	GET  /metrics             Prometheus: fenceguard_* series and whatever else the registry holds
//
// Lock holders use the /items routes with the token of their lease; the admin
// routes are for operators and the demo's set-up (seeding an item, reading
// the final stock) and claim nothing. Serve /admin only where operators can
// reach it.
//
// Errors are RFC 9457 problem details (application/problem+json): the fencing
// middleware's for token refusals (428 missing, 400 malformed, 409 stale,
// 503 when the check could not be made — see package httpmw), and this
// package's for the rest (404 no such item, 400 bad body, 500 store failure).
// A store that refuses a token the middleware let through (a newer holder
// claimed the item in between) answers the middleware's own 409, so a client
// sees one kind of refusal.
//
// # Fencing
//
// With fencing on (the default), the /items routes run behind the httpmw
// middleware, and the store enforces the token too:
//
//   - [PostgresStore]: the middleware claims in the PostgreSQL Fence, and every
//     read and write is one column-mode statement (storage/postgres.Table)
//     that checks and advances the row's own mark — the strong setup, safe
//     across any number of service processes.
//   - [MemoryStore]: the middleware claims in a token.MemoryFence and
//     serializes requests per item (httpmw SerializePerKey); the store itself
//     does not check tokens. Strong within this one process, which is the
//     only one that holds the items anyway.
//
// With Options.Unfenced the same handlers run without the middleware and hand
// the store no token: a plain SELECT, then a plain UPDATE — what a service
// that trusts its clients' locks does. The demo's control run uses it.
//
// The handler returned by New is safe for concurrent use; stores are too.
package service
