// Package httpmw enforces fencing tokens over HTTP: server middleware that
// refuses requests from holders who lost their lock, and a client
// [Transport] that sends a lease's token to the resource it was granted
// for.
//
// # Server
//
// [New] builds a [Middleware] from [Options]; [Middleware.Handler] is plain
// net/http middleware, so it mounts on [http.ServeMux], chi and anything
// else:
//
//	mw, err := httpmw.New(httpmw.Options{
//		Resource: httpmw.PathValue("account:{id:int}"), // /accounts/7/debit → "account:7"
//		Fence:    fence,                                // where the marks live
//	})
//	mux.Handle("POST /accounts/{id}/debit", mw.Handler(debit))
//
// For each request it reads the [token.Header] header, derives the
// resource key from the route ([PathValue] on ServeMux, [ChiParam] on chi
// v5.0.12 or later; never from anything else the client sends), runs
// [Options.Check], claims the key in the [token.Fence], and only then calls
// the handler, with the key and token in the request context
// ([token.FromContext]) for store enforcers such as storage/postgres. The
// key template names the kind of resource, so an account's key never meets
// an order's; {id:int} admits only an integer's canonical form, so "01" is
// no second lock on row 1.
// Reads that carry a token claim like writes; by default GET, HEAD and
// OPTIONS may come without one and every other method must carry one
// ([Options.Require]).
//
// # Guarantees
//
// The claim and the handler's effect are two steps, and a newer holder can
// claim between them. What closes that gap:
//
//   - Middleware and a store enforcer (strong, across processes): the
//     handler writes through an enforcer that checks the token in the same
//     statement as the write (storage/postgres), using the context's token.
//     [WriteError] answers the store's refusal (stale, a condition not met,
//     no such row, …) with its problem.
//   - [Options.SerializePerKey] (strong within one process): a per-key
//     mutex is held from before the claim until the handler returns. It
//     holds only if every access goes through this one Middleware.
//   - Middleware alone (weak): it refuses tokens already stale when the
//     request arrives, not a request that loses the race after the claim.
//
// A route fences one resource. A request that needs several (a transfer
// between two accounts) is fenced at the store instead: the handler
// derives every key from the route, takes each key's token from the
// request in a form of the application's own, and claims them all in one
// all-or-nothing step (storage/postgres's TxAll), answering its refusal
// with [WriteError]. The middleware cannot do it safely: pairing several
// tokens with keys the client must not name leaves only their order in
// repeated headers, which are refused as possibly tampered with; and a
// [token.Fence] claims one key at a time, so a request refused on its
// second key would already have moved its first key's mark.
//
// A token is a number, not a credential: [Options.Check] (default
// [token.DefaultCheck], the clock bound) refuses tokens the lock cannot have
// granted before they move any mark; use [token.SequencerCheck] with etcd's
// and ZooKeeper's tokens. Neither check authenticates: keep fenced routes
// to clients that take the lock. The trust model is in docs/design.md,
// "Forged tokens: the trust model".
//
// # Responses
//
// Refusals are RFC 9457 problem details ([ContentType], [Problem]); the
// handler does not run:
//
//   - 428 [TypeMissing]: no token where one is required.
//   - 400 [TypeInvalid]: not the wire form ([token.Parse]), two headers, or
//     a token the store cannot hold.
//   - 404 [TypeNoResource]: the route gives no valid key (1 to 512 bytes
//     of UTF-8 without control characters; the template's form).
//   - 403 [TypeForged]: a token the check refused; "bound" is its limit.
//   - 409 [TypeStale]: below the mark, which "current" holds.
//   - 503 [TypeUnavailable]: the check or the Fence could not decide, or
//     the request ended while waiting for its key.
//
// A handler answers its store's errors with [WriteError], in the same
// types, plus 409 [TypeCondition] (a condition of the access was false)
// and 500 [TypeKeyMismatch] (the store was asked about another lock's key
// than the route's); a missing row is a 404 [TypeNoResource].
//
// Bodies never echo the header or the path; a 409 names the resource key
// only when it is short, visible ASCII. No input makes the middleware panic
// or answer 5xx other than 503. [Options.Observe] sees every decision as an
// [Outcome] (count them there); [Options.Log] logs refusals through a
// rate-limited [RefusalLog]. The middleware logs nothing by itself.
//
// # Client
//
// [Transport] sends the token in a request's context only to a request
// that [Transport.Key] maps to the context's lock key; a token granted for
// sku:42 never claims sku:43. [RouteKey] builds that Key from the server's
// routes and key template, so client and server derive the same key. Every
// refusal in one of the types above comes back from [http.Client.Do] as an
// error (a [*Problem] inside a *url.Error) that matches the sentinel the
// server's error matched: errors.As finds a [*token.StaleError] in a stale
// refusal, errors.Is matches [token.ErrCondition], [token.ErrNotFound],
// [token.ErrForged], [ErrUnavailable] and the rest. A token-carrying
// request through a Transport without a Key fails with [ErrNoKey].
//
// # Errors and concurrency
//
// [New] and [RouteKey] fail with descriptive errors; [PathValue] and
// [ChiParam] panic on a malformed key template. A [Middleware], a
// [Transport] and a [RefusalLog] are safe for concurrent use once built;
// nothing here starts a goroutine. The reasoning is in docs/design.md,
// "HTTP middleware".
package httpmw
