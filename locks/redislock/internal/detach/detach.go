// Package detach lets a call return as soon as its context is done while
// the Redis command it sent finishes in the background.
//
// go-redis bounds a command by its context's deadline (with
// ContextTimeoutEnabled) or by the client's ReadTimeout, and never watches
// ctx.Done(): a context cancelled without a deadline — an HTTP server's
// request context when the client goes — would hold the call until the
// reply or the ReadTimeout. [Call] runs the command in a goroutine and
// returns ctx's error when ctx is done first.
//
// The command keeps the caller's context, so once it is done go-redis
// sends nothing more (it checks the context before taking a connection and
// before a retry); what was sent already runs or not, as when a deadline
// cuts a call short: its outcome is unknown. The goroutine ends with the
// reply, the socket's timeout or the client's Close.
package detach

import (
	"context"
	"sync"
)

// Group counts the commands running in the background, so that a
// locker's Close can wait for them. The zero value is ready to use; it
// must not be copied after first use.
type Group struct {
	mu   sync.Mutex
	n    int        // guarded by mu
	idle *sync.Cond // on mu; made by Wait
}

func (g *Group) add(d int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.n += d
	if g.n == 0 && g.idle != nil {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

// Wait waits until no command started through g runs any more. Calls may
// start commands meanwhile and after.
func (g *Group) Wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle == nil {
		g.idle = sync.NewCond(&g.mu)
	}
	for g.n > 0 {
		g.idle.Wait()
	}
}

// Call runs fn — which sends commands with ctx and waits for their replies
// — and returns its results, or ctx's error as soon as ctx is done, fn
// then finishing in the background, counted in g (which may be nil). A
// ctx that is done already fails at once and fn does not run. A ctx that
// can never be done runs fn in the caller.
func Call[T any](g *Group, ctx context.Context, fn func() (T, error)) (T, error) {
	v, _, err := Start(g, ctx, fn)
	return v, err
}

// Start is [Call] that also returns, when ctx cut the call short, a
// channel closed once fn has returned (nil otherwise).
func Start[T any](g *Group, ctx context.Context, fn func() (T, error)) (T, <-chan struct{}, error) {
	var zero T
	done := ctx.Done()
	if done == nil {
		v, err := fn()
		return v, nil, err
	}
	if err := ctx.Err(); err != nil {
		return zero, nil, err
	}
	type result struct {
		v   T
		err error
	}
	res := make(chan result, 1)
	finished := make(chan struct{})
	g.add(1)
	go func() {
		defer g.add(-1)
		defer close(finished)
		v, err := fn()
		res <- result{v, err}
	}()
	select {
	case r := <-res:
		return r.v, nil, r.err
	case <-done:
	}
	select {
	case r := <-res: // the reply came in with the cancel: take it
		return r.v, nil, r.err
	default:
		return zero, finished, ctx.Err()
	}
}
