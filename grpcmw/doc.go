// Package grpcmw enforces fencing tokens over gRPC: server interceptors
// that refuse calls from holders who lost their lock, and client
// interceptors that send a lease's token to the resource it was granted
// for. It is the gRPC sibling of package httpmw, in a module of its own so
// that grpc stays out of the core's module graph.
//
// # Server
//
// [New] builds an [Interceptor] from [Options]; install both of its
// interceptors, alone or in a chain:
//
//	fg, err := grpcmw.New(grpcmw.Options{
//		Resource: func(_ context.Context, method string, req any) (string, error) {
//			if r, ok := req.(*pb.DebitRequest); ok {
//				return "account:" + strconv.FormatInt(r.GetAccount(), 10), nil
//			}
//			return "", errors.New("not a fenced request")
//		},
//		Fence: fence, // where the marks live
//	})
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(fg.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(fg.StreamServerInterceptor()))
//
// For each call to a fenced method ([Options.Fenced]) it reads the
// [MetadataKey] metadata, derives the resource key from the method and
// the request message ([Options.Resource]; never from a key the client
// names beside it), runs [Options.Check], claims the key in the
// [token.Fence], and only then calls the handler, with the key and token
// in its context ([token.FromContext]) for store enforcers such as
// storage/postgres. By default every fenced method requires a token
// ([Options.Require]); a call that carries one claims whatever the method.
// Resource (and the client's Key) gets the full method,
// "/package.Service/Method", and the request as the server's codec
// decoded it: a generated message, or any type a codec of your own makes
// (nothing here needs generated code).
//
// A stream claims once, at its start, with the key its method gives
// (Resource sees a nil message) — or, for the methods
// [Options.KeyFromFirstMessage] names, when its handler receives the first
// message, with the key that message gives; until then its context
// carries no token and SendMsg fails with FAILED_PRECONDITION, sending
// nothing, so such a handler receives before it sends. A newer holder's
// claim does not cut off a stream already open: it goes on under the
// token it was opened with, unless [Options.CheckEachMessage] claims
// again before every message it receives (its RecvMsg then returns the
// stale refusal), or the handler's store checks the token on every
// access. Only the first message is keyed: the handler must act on the
// key its context carries, never on another one a later message names
// (storage/postgres refuses such an access as a key mismatch; the
// interceptor alone does not see it).
//
// # Guarantees
//
// The claim and the handler's effect are two steps, and a newer holder can
// claim between them. What closes that gap:
//
//   - Interceptor and a store enforcer (strong, across processes): the
//     handler writes through an enforcer that checks the token in the same
//     statement as the write (storage/postgres), using the context's
//     token, and answers its refusal with [Error]. [ClaimInStore] leaves
//     the claim to the store.
//   - [Options.SerializePerKey] (strong within one process): a per-key
//     mutex is held from before the claim until the handler returns (a
//     stream: until it ends). It holds only if every access goes through
//     this one Interceptor.
//   - Interceptor alone (weak): it refuses tokens already stale when the
//     call arrives, not a call that loses the race after the claim.
//
// A token is a number, not a credential: [Options.Check] (default
// [token.DefaultCheck], the clock bound) refuses tokens the lock cannot
// have granted before they move any mark; use [token.SequencerCheck] with
// etcd's and ZooKeeper's tokens. Neither authenticates: keep fenced
// methods to clients that take the lock (the trust model is in
// docs/design.md, "Forged tokens: the trust model"). In a chain, put
// authentication before these interceptors: a call they admit has
// already moved the mark when a later interceptor refuses it, and an
// unauthenticated caller could fence out the lock's holder.
//
// # Status codes
//
// Every refusal carries an [errdetails.ErrorInfo] of [Domain] whose reason
// says what happened, and whose metadata holds the tokens as decimal
// strings ("presented", "current", "bound") and, for a stale token, the
// resource key when it is at most 64 bytes of visible ASCII. The handler
// does not run, and no mark moves:
//
//   - FAILED_PRECONDITION [ReasonMissing]: no token where one is required.
//   - INVALID_ARGUMENT [ReasonInvalid]: not the wire form ([token.Parse]),
//     two values, the binary key x-fencing-token-bin, or a token the store
//     cannot hold.
//   - INVALID_ARGUMENT [ReasonNoResource]: the call gives no valid key (1
//     to 512 bytes of UTF-8 without control characters).
//   - PERMISSION_DENIED [ReasonForged]: a token the check refused; "bound"
//     is its limit.
//   - ABORTED [ReasonStale]: below the mark, which "current" holds. The
//     client must restart its read-modify-write under a new lease.
//   - UNAVAILABLE [ReasonUnavailable]: the check or the Fence could not
//     decide, or the call ended while waiting for its key.
//
// A handler answers its store's errors with [Error], in the same reasons,
// plus FAILED_PRECONDITION [ReasonCondition], NOT_FOUND [ReasonNoResource]
// (no such row) and INTERNAL [ReasonKeyMismatch]. Messages never echo the
// metadata or the request. [Options.Observe] sees every decision as an
// [Outcome] (count them there: metrics/prom's Metrics.GRPC takes its
// Resource and Result as plain strings, with bounded labels, and neither
// module imports the other); [Options.Log] logs refusals through a
// rate-limited [RefusalLog]. The interceptor logs nothing by itself.
//
// # Client
//
// A [Client] sends the token in a call's context only to a call that
// [Client.Key] maps to the context's lock key; a token granted for sku:42
// never claims sku:43. Its interceptors return every refusal above as a
// [*Refusal] that keeps the server's status (status.Code still works) and
// unwraps to the typed error: errors.As finds a [*token.StaleError] (with
// the Current mark) in a stale refusal, errors.Is matches
// [token.ErrStale], [token.ErrForged], [token.ErrMissing],
// [token.ErrInvalid], [token.ErrNotFound], [token.ErrCondition],
// [ErrUnavailable] and [ErrKeyMismatch]. A token-carrying call through a
// Client without a Key fails with [ErrNoKey].
//
// # Errors and concurrency
//
// [New] fails with a descriptive error when Resource or Fence is missing.
// An [Interceptor], a [Client] and a [RefusalLog] are safe for concurrent
// use once built;
// nothing here starts a goroutine. The reasoning is in docs/design.md,
// "gRPC interceptors".
package grpcmw
