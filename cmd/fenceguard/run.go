package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"time"

	"github.com/fenceguard/fenceguard/guard"
	"github.com/fenceguard/fenceguard/locks"
	"github.com/fenceguard/fenceguard/token"
)

// runOptions are run's flags.
type runOptions struct {
	lock           string
	key            string
	prefix         string
	ttl            time.Duration
	wait           time.Duration
	lockDelay      time.Duration
	grace          time.Duration
	connectTimeout time.Duration
	conflictExit   int
	log            *slog.Logger
}

// releaseTimeout bounds the release at the end of a run.
const releaseTimeout = 5 * time.Second

// minTTL is the shortest --ttl: a process is not scheduled reliably enough
// to renew a shorter lease, whatever the lock service allows.
const minTTL = time.Second

// maxTTL is the longest --ttl: within what every lock service takes, TTL
// plus the longest lock-delay included. A lease lives as long as CMD runs
// whatever its TTL; the TTL is how long a holder that vanished keeps it.
const maxTTL = 24 * time.Hour

func (o *runOptions) check(argv []string) error {
	switch {
	case o.key == "":
		return usageErrorf("run: --key is required")
	case len(argv) == 0:
		return usageErrorf("run: no command given: fenceguard run [flags] -- CMD [ARGS...]")
	case o.ttl < minTTL || o.ttl > maxTTL:
		return usageErrorf("run: --ttl %v: must be from %v to %v (the lease is renewed every TTL/3 while CMD runs)", o.ttl, minTTL, maxTTL)
	case o.wait < 0:
		return usageErrorf("run: --wait %v: must be 0 (one attempt) or positive", o.wait)
	case o.grace <= 0:
		return usageErrorf("run: --grace %v: must be positive", o.grace)
	case o.connectTimeout <= 0:
		return usageErrorf("run: --connect-timeout %v: must be positive", o.connectTimeout)
	case o.conflictExit < 0 || o.conflictExit > 255:
		return usageErrorf("run: --conflict-exit-code %d: must be in 0..255", o.conflictExit)
	}
	if err := locks.CheckLockDelay(o.lockDelay); err != nil {
		return usageErrorf("run: --lock-delay: %v", err)
	}
	if o.lockDelay > 0 && o.grace >= o.lockDelay {
		return usageErrorf("run: --grace %v must be shorter than --lock-delay %v, so that a command whose lease was lost is gone before the next holder may start", o.grace, o.lockDelay)
	}
	return nil
}

// forwarded are the signals run passes on to CMD's process group.
var forwarded = []os.Signal{sigHUP, os.Interrupt, sigQUIT, sigTERM, sigUSR1, sigUSR2}

// earlySignals, when main set it up for run, has received the forwarded
// signals since the program started.
var earlySignals chan os.Signal

// runCmd acquires the lock, runs argv under it and returns how the program
// must end.
func runCmd(ctx context.Context, o runOptions, argv []string) error {
	if err := o.check(argv); err != nil {
		return err
	}
	ep, err := lockEndpoint(o.lock)
	if err != nil {
		return err
	}
	// Find CMD before taking the lock: a typo must not cost the lock.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return cmdNotRunnable(argv[0], err)
	}

	// From here on the signals are ours to handle: one that arrives while
	// the lock is being taken ends the wait; once CMD runs, it is passed on.
	sigc := earlySignals
	if sigc == nil {
		sigc = make(chan os.Signal, 8)
		signal.Notify(sigc, forwarded...)
	}
	defer signal.Stop(sigc)
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	interrupted := make(chan os.Signal, 1)
	waiting, watched := make(chan struct{}), make(chan struct{})
	endWatch := func() { close(waiting); <-watched }
	go func() {
		defer close(watched)
		select {
		case s := <-sigc:
			interrupted <- s
			stop(interruptedError(s))
		case <-waiting:
		}
	}()

	c, err := dial(ctx, ep, o.connectTimeout, o.log)
	if err != nil {
		endWatch()
		return orSignal(interrupted, err)
	}
	// Closing waits for clients' calls in flight, which a service that
	// stopped answering holds up: bounded, for the exit is near.
	defer closeWithin(closeTimeout, c.Close)
	l, closeLocker, err := c.locker(lockOptions{prefix: o.prefix, lockDelay: o.lockDelay, log: o.log})
	if err != nil {
		endWatch()
		return withCode(exitUsage, err)
	}
	defer closeWithin(closeTimeout, closeLocker)
	g, err := guard.New(l, guard.Options{TTL: o.ttl, Logger: o.log})
	if err != nil {
		endWatch()
		return withCode(exitUsage, fmt.Errorf("run: %w", err))
	}
	lease, err := acquire(ctx, g, c, o)
	endWatch()
	if err != nil {
		return orSignal(interrupted, err)
	}
	select {
	case s := <-interrupted: // arrived as the lock was granted
		releaseNow(lease)
		return interruptedError(s)
	default:
	}
	// The watcher above has returned: sigc is read below only.

	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = append(os.Environ(),
		"FENCING_TOKEN="+strconv.FormatUint(uint64(lease.Token()), 10),
		"FENCING_KEY="+o.key,
		"FENCING_HEADER="+token.Header,
		// So that fenceguard token, run inside CMD, asks the same lock.
		envLock+"="+o.lock,
		envPrefix+"="+o.prefix,
	)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	ownGroup(cmd)
	jobc := make(chan os.Signal, 2)
	if len(jobControl) > 0 { // Notify with no signals would relay all
		signal.Notify(jobc, jobControl...)
	}
	defer signal.Stop(jobc)
	if err := cmd.Start(); err != nil {
		releaseNow(lease)
		return cmdNotRunnable(argv[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var (
		lostCause error
		kill      <-chan time.Time
	)
	leaseDone := lease.Context().Done()
	for {
		select {
		case s := <-sigc:
			signalGroup(cmd, s)
			if s != sigUSR1 && s != sigUSR2 {
				// A stopped CMD acts on a signal only once continued.
				signalGroup(cmd, sigCONT)
			}
			continue
		case s := <-jobc:
			jobControlSignal(cmd, s)
			continue
		case <-leaseDone:
			leaseDone = nil
			ended := false
			select {
			case err = <-done: // CMD had ended already: see below
				ended = true
			default:
			}
			if ended {
				break
			}
			lostCause = context.Cause(lease.Context())
			signalGroup(cmd, sigTERM)
			signalGroup(cmd, sigCONT)
			killIn := o.grace
			if o.lockDelay > 0 {
				// The next holder may start when the delay past the
				// lease's deadline is over: CMD must be gone by then,
				// whatever is left of its grace (none, after a long
				// freeze). A tenth of the delay is kept in hand, for the
				// lock service's expiry is counted from its own receipt of
				// the last renewal, a little after the deadline's start.
				killIn = min(killIn, time.Until(lease.Deadline().Add(o.lockDelay-o.lockDelay/10)))
			}
			t := time.NewTimer(max(killIn, 0))
			defer t.Stop()
			kill = t.C
			continue
		case <-kill:
			kill = nil
			signalGroup(cmd, sigKILL)
			continue
		case err = <-done:
		}
		break
	}
	endedFirst := false
	if lostCause == nil && (lease.Context().Err() != nil || !time.Now().Before(lease.Deadline())) {
		// CMD's end and the lease's were both pending when this process
		// ran again (it was frozen with CMD, and CMD was thawed first):
		// CMD may have acted after the lease ran out. Lost it is.
		endedFirst = true
		lostCause = context.Cause(lease.Context())
		if lostCause == nil {
			lostCause = fmt.Errorf("lease on %q (token %d) lost: %w", o.key, lease.Token(), guard.ErrDeadline)
		}
	}
	if lostCause != nil {
		// Whatever CMD left in its group acts under a lost lease too.
		signalGroup(cmd, sigKILL)
	} else {
		// What CMD left running in its group (a shell's background job)
		// would act after the release: it gets TERM, and KILL after
		// --grace.
		endGroup(cmd, o.grace)
	}
	// Release only now, with CMD gone: within a lock-delay, the release is
	// what lets the next holder in.
	relErr := releaseNow(lease)
	if endedFirst {
		return withCode(exitLeaseLost, fmt.Errorf("%v; %s ended, but after the lease's deadline: it may have acted without the lock", lostCause, argv[0]))
	}
	if lostCause != nil {
		return withCode(exitLeaseLost, fmt.Errorf("%v; %s was terminated", lostCause, argv[0]))
	}
	if relErr != nil && !errors.Is(relErr, guard.ErrLost) {
		o.log.Warn("fenceguard: release failed; the lock frees when its lease expires", "key", o.key, "err", relErr)
	}
	return exitStatus(err)
}

// acquire takes the lock: one attempt with --wait 0, else waiting up to
// --wait in the lock's queue.
func acquire(ctx context.Context, g *guard.Guard, c *conn, o runOptions) (*guard.Lease, error) {
	start := time.Now()
	// The first attempt, whatever --wait is: a free lock is taken even
	// with a --wait shorter than a round trip.
	lease, err := g.TryAcquire(ctx, o.key)
	if o.wait > 0 && errors.Is(err, locks.ErrNotObtained) {
		wctx, cancel := context.WithTimeout(ctx, o.wait-time.Since(start))
		defer cancel()
		lease, err = g.Acquire(wctx, o.key)
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && !failedAttempt(err) {
			// The wait ran out with no attempt failing: the lock was held
			// all along, or the service stopped answering while the
			// acquire waited for a wake-up. Ask it.
			pctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
			perr := c.ping(pctx)
			cancel()
			if perr != nil {
				return nil, withCode(exitUnavailable, fmt.Errorf("lock service %s stopped answering while run waited for %q: %w", c.ep, o.key, perr))
			}
		}
	}
	switch {
	case err == nil:
		return lease, nil
	case errors.Is(err, locks.ErrNotObtained):
		return nil, o.conflict(fmt.Errorf("lock %q is held by another holder", o.key))
	case errors.Is(err, locks.ErrInvalidArgument):
		return nil, withCode(exitUsage, err)
	case errors.Is(err, token.ErrRange):
		return nil, withCode(exitSoftware, err)
	case ctx.Err() != nil:
		return nil, withCode(exitSoftware, context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded) && !failedAttempt(err):
		return nil, o.conflict(fmt.Errorf("lock %q still held by another holder after --wait %v", o.key, o.wait))
	}
	return nil, withCode(exitUnavailable, fmt.Errorf("lock service %s: %w", c.ep, err))
}

// conflict is the outcome of a lock held by another: exit
// --conflict-exit-code, saying why on stderr unless that code is 0 (a cron
// job mails whatever it prints).
func (o runOptions) conflict(err error) error {
	if o.conflictExit == 0 {
		o.log.Debug("fenceguard: " + err.Error())
		return silentExit(0)
	}
	return withCode(o.conflictExit, err)
}

// failedAttempt tells whether an acquire that ran out of time had attempts
// that failed (the guard wraps the last one's error beside the context's),
// rather than waiting its turn. An attempt whose socket timed out is not
// one: the client sets the socket's deadline from the context's, so the
// wait running out mid-request looks so; acquire then asks the service.
func failedAttempt(err error) bool {
	for err != nil {
		if m, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range m.Unwrap() {
				if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) && !errors.Is(e, os.ErrDeadlineExceeded) {
					return true
				}
			}
			return false
		}
		err = errors.Unwrap(err)
	}
	return false
}

// closeTimeout bounds the closing of clients at the end of a run.
const closeTimeout = 2 * time.Second

// closeWithin runs f, waiting for it at most d: what it leaves undone ends
// with the process.
func closeWithin(d time.Duration, f func() error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// releaseNow releases the lease within releaseTimeout.
func releaseNow(l *guard.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return l.Release(ctx)
}

// interruptedError is the outcome of signal s arriving while run takes the
// lock: the code a shell gives a command s ended.
func interruptedError(s os.Signal) error {
	return withCode(128+signalNumber(s), fmt.Errorf("interrupted by %v while taking the lock", s))
}

// orSignal prefers the code of a signal that ended the wait over err.
func orSignal(interrupted <-chan os.Signal, err error) error {
	select {
	case s := <-interrupted:
		return interruptedError(s)
	default:
		return err
	}
}

// cmdNotRunnable is the error of a CMD that cannot be started, with the
// code a shell gives it.
func cmdNotRunnable(name string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return withCode(exitNotFound, fmt.Errorf("%s: command not found", name))
	}
	return withCode(exitCannotExec, fmt.Errorf("%s: cannot run: %v", name, err))
}

// exitStatus turns CMD's end into the program's: its exit code, or 128+N
// for a signal.
func exitStatus(err error) error {
	if err == nil {
		return nil
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if n, ok := killedBy(exit); ok {
			return silentExit(128 + n)
		}
		return silentExit(exit.ExitCode())
	}
	return withCode(exitSoftware, err)
}

// lockEndpoint parses a --lock URL.
func lockEndpoint(raw string) (*endpoint, error) {
	if raw == "" {
		return nil, usageErrorf("no lock service: give --lock URL or set %s (%s)", envLock, lockSchemes)
	}
	ep, err := parseEndpoint(raw)
	if err != nil {
		return nil, err
	}
	if ep.scheme == schemePostgres {
		return nil, usageErrorf("%s is a store, not a lock service: --lock takes %s", redactURL(raw), lockSchemes)
	}
	return ep, nil
}
