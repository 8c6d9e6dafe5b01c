// Package httpmw enforces fencing tokens over HTTP: server middleware that
// refuses requests from holders who lost their lock, and a client
// [Transport] that sends the token of the lease in the request's context.
//
// # Server
//
// [New] builds a [Middleware] from [Options]; its [Middleware.Handler] is
// plain net/http middleware (func(http.Handler) http.Handler), so it mounts
// on chi, on [http.ServeMux] and on anything else:
//
//	mw, err := httpmw.New(httpmw.Options{
//		Resource: httpmw.ChiParam("sku"), // /sku/42 → "sku:42"
//		Fence:    fence,                  // where the high-water marks live
//	})
//	r.With(mw.Handler).Put("/sku/{sku}", updateStock)
//
// For each request the middleware reads the [token.Header] header, derives
// the resource key from the route (never from anything else the client
// sends), claims the key in the [token.Fence] — the token must not be below
// the key's high-water mark, and becomes it — and only then calls the
// handler, with the key and token in the request context
// ([token.FromContext]) for the handler and for store enforcers such as
// package storage/postgres.
//
// Reads are fenced too: a GET, HEAD or OPTIONS that carries a token claims
// like a write (a read-modify-write's read must claim, or a paused holder's
// later write can slip in). Without a token they pass unchecked by default;
// every other method must carry one ([Options.Require] changes that).
//
// # Which setup gives which guarantee
//
// The claim and the handler's effect are two steps. Between them, a newer
// holder can claim the resource and act, and the older request, already
// past the middleware, still acts after it. What closes that gap:
//
//   - Middleware + a store enforcer (strong). The handler writes through an
//     enforcer that checks the token in the same statement or transaction
//     as the write (storage/postgres: a conditional UPDATE on a token
//     column, or a fenced transaction), using the token from the context.
//     The middleware then refuses stale holders early and cheaply, and the
//     store makes the write itself safe, across any number of processes.
//     When the store refuses, [WriteStale] answers with the middleware's
//     own 409, so the client sees one kind of refusal.
//   - Middleware with [Options.SerializePerKey] (strong within one process).
//     A per-key mutex is held from before the claim until the handler
//     returns, so no other fenced request for that key runs in between.
//     This holds only if every access to the resource goes through this one
//     Middleware value in this one process — not through a second process,
//     a second Middleware, a background job, or requests exempt from the
//     token (tokenless reads are not serialized).
//   - Middleware alone (weak). It refuses every request whose token is
//     already stale when it arrives, which stops a holder that was paused
//     long enough for a newer one to reach the resource first. It does not
//     stop a request that passed the middleware from losing a race with a
//     newer claim before its effect lands.
//
// # Responses
//
// Refusals are RFC 9457 problem details ([ContentType], [Problem]); the
// request never reaches the handler. Clients tell them apart by type:
//
//   - 428 [TypeMissing]: no token where [Options.Require] asks for one.
//   - 400 [TypeInvalid]: not the token wire form ([token.Parse]), two
//     headers, or a token the Fence's store cannot hold (PostgreSQL's
//     bigint ends at 2^63−1).
//   - 404 [TypeNoResource]: [Options.Resource] failed, or gave a key
//     [ErrBadKey] describes.
//   - 403 [TypeForged]: above what the lock service issued
//     ([Options.Issued]).
//   - 409 [TypeStale]: below the high-water, which "current" holds.
//   - 503 [TypeUnavailable]: the check was not made — the Fence or Issued
//     failed, or the request ended while waiting for its key.
//
// Bodies carry the presented and current tokens where known, as JSON
// strings. They never echo the header or the path: the detail names the
// reason (e.g. "leading zero"), and the cause, for logs, is in [Problem.Err]
// for a custom [Options.ErrorWriter]. No input makes the middleware panic
// or answer 5xx; 503 comes only from a Fence, an Issued function or a
// request context that failed.
//
// # Forged tokens
//
// A token is a number, not a credential: any client that may call a fenced
// route can present any token. Presenting one below the high-water only
// gets it refused, but presenting 2^64−1 would make it the high-water
// forever and lock every honest holder out. [Options.Issued] closes that:
// it asks the lock service for an upper bound of the tokens issued for the
// resource's lock (the Issued method of memlock's and redislock's Locker
// fits it) and refuses higher ones with 403. Trust model:
//
//   - The check caps tokens, it does not authenticate them. A client can
//     still present a token at or below the bound and so preempt the
//     current holder, as if it had been granted the lock. The next honest
//     grant is above it, so the damage ends there; with clock-floored
//     tokens (memlock, redislock) the bound is close to the current time in
//     microseconds and easy to guess. Keep fenced routes to clients that
//     are meant to take the lock; signed tokens are out of scope.
//   - Issued receives the resource key; mapping it to the lock key the
//     holders lock (often the same string) is the caller's, and a wrong
//     mapping refuses honest holders (fail closed) or bounds nothing.
//   - It costs one query to the lock service per fenced request, before
//     the claim (a mutex for memlock, a round trip for a remote service),
//     and fails closed: if the lock service cannot answer, neither can the
//     resource.
//   - Without it, every client holding a valid route can raise the mark.
//
// # Resource keys
//
// [ChiParam] and [PathValue] give keys "name:value" from a route parameter.
// A key must be 1 to [MaxKeyLen] bytes of UTF-8 without control
// characters; anything else answers 404, so no path can reach a store that
// would fail on it. Keys must be canonical: one key per resource.
//
// # Errors
//
// [New] fails with an error wrapping [ErrBadOptions]. Clients test a
// [Transport] error with errors.As(err, new(*token.StaleError)) or
// errors.Is(err, token.ErrStale).
package httpmw
