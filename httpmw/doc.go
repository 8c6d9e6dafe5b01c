// Package httpmw enforces fencing tokens over HTTP: server middleware that
// refuses requests from holders who lost their lock, and a client
// [Transport] that sends the token of the lease in the request's context
// to the resource it was granted for.
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
// sends), runs [Options.Check] — is the token one the lock can have
// granted? — claims the key in the [token.Fence] — the token must not be
// below the key's high-water mark, and becomes it — and only then calls the
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
//   - 403 [TypeForged]: above any token the lock can have granted
//     ([Options.Check], or the Fence's own check); "bound" is the largest
//     token the check accepted.
//   - 409 [TypeStale]: below the high-water, which "current" holds.
//   - 503 [TypeUnavailable]: the check was not made — the Check could not
//     decide (its lock service is unreachable), the Fence failed, or the
//     request ended while waiting for its key.
//
// Bodies carry the presented, current and bound tokens where known, as
// JSON strings. They never echo the header or the path: the detail names
// the reason (e.g. "leading zero"), and the cause, for logs, is in
// [Problem.Err] for a custom [Options.ErrorWriter]. The one thing derived
// from the request is a 409's "resource", the resource key the route
// gave, and only when it is safe to render as is: at most [MaxEchoKey]
// bytes of visible ASCII; any other key (long, with spaces, controls,
// non-ASCII or bidirectional characters such as U+202E) is left out of
// the body. No input makes the middleware panic or answer 5xx; 503 comes
// only from a Check, a Fence or a request context that failed.
//
// # Counting and logging refusals
//
// Refusals are expected traffic: stale holders, clients' bugs, scans. The
// middleware logs nothing by itself. [Options.Observe] sees every
// decision, refusals made before the Check and the Fence run (428, 400,
// 404) included, as an [Outcome] with a fixed [Result] — count them there
// (metrics/prom's Metrics.HTTP). [Options.Log] logs refusals through a
// [RefusalLog], which keeps the first of each result visible and then
// writes at most a burst per interval, with the count of those it left
// out: a flood of bad requests costs a few records a minute, not a record
// each.
//
// # Forged tokens
//
// A token is a number, not a credential: any client that may call a
// fenced route can present any token, and a token above every honest one
// becomes the high-water and refuses every honest holder after it.
// [Options.Check] decides, before the claim and before
// [Options.SerializePerKey]'s wait, whether the token can have been
// granted; a refused token moves no mark and holds up no request. Threat
// model:
//
//   - What an attacker controls: any client of a fenced route chooses the
//     header's token freely, for any resource its path names. It does not
//     choose the resource key (the route gives it), the check, or the
//     resource's clock.
//   - The default, [token.ClockBound] (what [token.DefaultCheck] returns):
//     refuses tokens more than [token.DefaultSkew] (5 min) above the
//     resource's clock in µs. For clock-floored tokens (memlock,
//     redislock, redlock: max(counter + 1, the lock server's clock in
//     µs)) a forger can raise a mark at most to now + 5 min, so the honest
//     holders it locks out get through again once the lock service's
//     clock passes that mark: a lockout of at most the skew, not forever.
//     For etcd revisions and ZooKeeper zxids, which are far below the
//     clock, it bounds nothing: alone, it lets a forger lock those
//     resources out until an operator resets the mark. Cost: one clock read per request, no round trip. It
//     refuses honest tokens only if the lock server's clock runs more than
//     the skew ahead of the resource's, or a locker's counter was healed
//     above the clock.
//   - [token.SequencerCheck] (Chubby's CheckSequencer): asks the lock
//     service for the token of the current grant of the resource's lock
//     and refuses anything above it — whichever backend. A forger can then
//     at most act as the current holder until the next grant, by
//     presenting its exact token (lower ones are stale once the holder has
//     claimed); it can never raise a mark above the holder's token, so it
//     can never lock out the holder or the waiters queued behind it. Cost: one query to the
//     lock service for the first token of each grant this process sees
//     (answers are cached; a forger's every token above the cache costs
//     one more), and it fails closed: if the lock service cannot answer,
//     the request is refused with 503. Its LockKey option maps the resource
//     key to the lock key (the same string by default); a wrong mapping
//     refuses honest holders or bounds nothing.
//   - Use both, the cheap one first, so made-up tokens far above the clock
//     cost no query: token.All(token.ClockBound{}, token.SequencerCheck(…)).
//     memlock's Locker is itself a [token.Sequencer]; the other backends
//     provide one built from a plain client.
//   - Tokens are not credentials, and neither check authenticates: the
//     current holder's token is no secret (a 409 tells "current", a 403
//     tells "bound"), so anyone who may call a fenced route may act as the
//     current holder. Keep fenced routes to clients that are meant to take
//     the lock; signed tokens are out of scope.
//   - [token.NoCheck] turns the check off: any client can then lock a
//     resource out for good by presenting 2^64−1. A mark poisoned anyway
//     is set back by hand with the Fence's Reset ([token.Resetter]),
//     logged.
//
// # Resource keys
//
// [ChiParam] and [PathValue] give keys "name:value" from a route parameter.
// A key must be 1 to [MaxKeyLen] bytes of UTF-8 without control
// characters; anything else answers 404, so no path can reach a store that
// would fail on it. Keys must be canonical: one key per resource.
//
// # Client
//
// [Transport] sends the token in a request's context only to a request
// that [Transport.Key] maps to the context's lock key, and sends every
// other request without it: a token granted for sku:42 never claims
// sku:43. [RouteKey] builds the Key from the server's route, deriving the
// same "name:value" key as [PathValue] and [ChiParam] (the same
// unescaping), so client and server agree on which resource a request is
// for. A Transport without a Key refuses requests whose context carries a
// token rather than guess.
//
// # Errors
//
// [New] and [RouteKey] fail with an error wrapping [ErrBadOptions].
// Clients test a [Transport] error with errors.As(err,
// new(*token.StaleError)) or errors.Is(err, token.ErrStale) for a stale
// token, and errors.Is(err, [ErrNoKey]) for a Transport without a Key.
package httpmw
