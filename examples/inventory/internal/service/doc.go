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
// Errors are RFC 9457 problem details (application/problem+json): this
// package's for its own answers (404 no such item, 409 sold out, 400 bad
// body, 405), and httpmw's for everything about tokens and the store — the
// middleware's refusals (428 missing, 400 malformed, 403 forged, 503 when
// the check could not be made) and, through httpmw.WriteError, the store's
// (409 stale, with the item's mark; 403, 400, 503, 500). So a client
// through httpmw.Transport gets every fencing refusal as an error:
// a *token.StaleError for a stale token, and so on.
//
// # Fencing
//
// With fencing on (the default), the /items routes run behind the httpmw
// middleware, which parses the token and runs the Check — the clock bound,
// then, with Options.Sequencer, the lock service's current grant — and
// refuses what fails (400, 403, 428) before any store sees it. It claims
// nothing: its Fence accepts whatever the Check let through. The claim is
// the store's, in the same atomic step as the access:
//
//   - [PostgresStore]: every fenced read and write is one column-mode
//     statement (storage/postgres.Table) that checks and advances the row's
//     own mark — the strong setup, safe across any number of service
//     processes over one database.
//   - [MySQLStore]: the same on MySQL or MariaDB (storage/mysql.Table);
//     a fenced read is the claim's statement, then the read.
//   - [MemoryStore]: each item's mark is checked and advanced under the
//     store's mutex, in the critical section of the access. Strong within
//     this one process, which is the only one that holds the items anyway.
//
// Why not claim in the middleware too (a token.Fence, fence_tokens on
// PostgreSQL)? The middleware claims before the handler has looked at the
// request, so a claim there moves the mark on requests the handler then
// refuses — a bad body (400), a name longer than an item's (404), an item
// that does not exist (404, and a mark left for ever for every name a
// client makes up) — and it costs a second commit per request while adding
// no safety: the guarantee comes from the store's check, which must be in
// the statement that accesses the row, since a request that passed any
// earlier claim can still be overtaken before its access. One claim, in the
// access, is the cheapest setup that keeps the strong guarantee: a request
// is refused, or claims and accesses in one step; a 404 leaves no state.
//
// A holder that lost its lock tends to keep trying with its old token, and
// each try would cost the store a refused claim plus a second statement to
// say why (stale, or no such row). So each process remembers, per item, the
// mark the store last reported — the token it accepted, or the mark named
// in a stale refusal — for Options.MarkCacheTTL (default 1 s), and refuses a
// lower token with the same 409 without a statement. This only ever
// refuses what the store would: marks only go up, except by an operator's
// reset, which drops the entry in the instance that made it (and the
// answers still to come of requests in flight there); another
// instance may go on refusing tokens between the new mark and the old for up
// to the TTL. Nothing is accepted on the cache's word: a token it lets
// through is checked and claimed by the store as before.
//
// Refusals are expected traffic (a holder that lost its lock, a client
// with a bad header), so they are not each logged at Info: httpmw's
// RefusalLog logs the first of each kind, then at most one a minute with
// the count left out, the rest at Debug — the middleware's refusals and the
// store's stale ones alike. Every request's outcome is counted in
// fenceguard_http_requests_total{class,result} (header-parse refusals under
// class "none": the key is not derived yet), the Check's refusals in
// fenceguard_claims_total under class "sku" and the store's claims under
// class "items".
//
// Methods: a 405 names the route's methods in Allow; HEAD answers every GET
// route like GET without a body (and claims like GET when it carries a
// token); OPTIONS answers 204 with Allow, touching no item.
//
// With Options.Unfenced the same handlers run without the middleware and hand
// the store no token: a plain SELECT, then a plain UPDATE — what a service
// that trusts its clients' locks does. The demo's control run uses it.
//
// The handler returned by New is safe for concurrent use; stores are too.
package service
