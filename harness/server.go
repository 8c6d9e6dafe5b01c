package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors returned by the fault methods of [Server]; test them with errors.Is.
var (
	// ErrNotRunning: Stop, Kill, Pause or Resume of a server that is stopped.
	ErrNotRunning = errors.New("harness: server is not running")
	// ErrRunning: Start of a server that is running.
	ErrRunning = errors.New("harness: server is already running")
	// ErrClosed: the server was torn down at the end of its test or package.
	ErrClosed = errors.New("harness: server was torn down")
	// ErrPortTaken: another process bound the port first. A [Kind]'s Ready
	// returns it (wrapped) when the process answering is not the one started;
	// Launch then starts over on new ports.
	ErrPortTaken = errors.New("harness: port taken by another process")
)

// StartTimeout bounds a server's start, readiness included: generous, for
// two loaded cores running -race tests of many packages at once.
const StartTimeout = 60 * time.Second

const (
	stopTimeout = 30 * time.Second // an etcd leader may spend ~7 s handing over
	goneTimeout = 15 * time.Second // for a killed process group to vanish
	pollEvery   = 25 * time.Millisecond
)

// Server is a server process that the harness started itself, with the
// handles to inject faults into it. Its address stays the same across Stop,
// Kill and Start. All methods are safe for concurrent use; they serialize.
//
// Kill, Pause and Resume act on the server's whole process tree (PostgreSQL's
// backends included). Shared servers (the Server field
// of [PG], [RedisDB], [EtcdDB], [ZK]) must not get faults: other tests use
// them. Ask for a dedicated one (NewRedis, NewPostgres, …) instead.
type Server struct {
	kind     Kind
	name     string // unique in this process, e.g. "redis-3"
	dir      string // everything of this server; removed at teardown
	port     int    // the client port
	peerPort int    // etcd only

	mu     sync.Mutex // serializes lifecycle methods; guards p and closed
	p      *proc      // the running process; nil when stopped
	closed bool
}

// proc is one run of the server process.
type proc struct {
	cmd     *exec.Cmd
	pid     int
	done    chan struct{} // closed once Wait returned
	waitErr error         // valid after done
	logFrom int64         // log offset where this run's output starts
}

// Kind is what differs between kinds of server (Redis, PostgreSQL, …): a
// backend package implements it and starts servers with [Launch] or
// [Create]. Its methods are called with the server's lifecycle lock held.
type Kind interface {
	// Prepare runs before every start: write configuration, create the data
	// directory (initdb) when it is missing.
	Prepare(ctx context.Context, s *Server) error
	// Command returns the server's command line; the harness sets its
	// output, process attributes (parent-death signal, process group) and
	// starts it.
	Command(s *Server) (*exec.Cmd, error)
	// Ready reports whether the process pid serves on s.Addr(). It is
	// polled until it returns nil; an error wrapping [ErrPortTaken] says
	// another process answers there.
	Ready(ctx context.Context, s *Server, pid int) error
	// StopSignal asks the main process to shut down gracefully.
	StopSignal() syscall.Signal
	// GracefulTeardown: stop gracefully rather than SIGKILL at the end.
	GracefulTeardown() bool
	// CanWipe reports whether Start(true) is possible.
	CanWipe(s *Server) error
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "server.log") }

// Dir returns the server's own directory, removed when it is torn down.
func (s *Server) Dir() string { return s.dir }

// DataDir returns Dir()/data, where the server keeps its data; Start(true)
// deletes it.
func (s *Server) DataDir() string { return s.dataDir() }

// Port returns the client port, the port of Addr.
func (s *Server) Port() int { return s.port }

// PeerPort returns the second port picked for the server (a cluster bus, a
// peer or quorum port), or 0 when it was created with one port.
func (s *Server) PeerPort() int { return s.peerPort }

// Kind returns the Kind the server was created with.
func (s *Server) Kind() Kind { return s.kind }

// Addr returns the host:port clients use. It does not change on restarts.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Name returns the server's name in this test process, e.g. "redis-3".
func (s *Server) Name() string { return s.name }

// LogFile returns the path of the server's log (its stdout and stderr).
func (s *Server) LogFile() string { return s.logPath() }

// PID returns the server's main process id, or 0 when it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return 0
	}
	return s.p.pid
}

// Running reports whether the server process is alive (paused counts).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p != nil && !s.p.exited()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts a stopped server on its old port and waits until it serves.
// With wipe it deletes the data directory first: the server comes back empty
// (a PostgreSQL server is initialized anew). Without wipe it keeps its data:
// Redis reloads its append-only file, PostgreSQL recovers. An etcd cluster
// member cannot be wiped (it would rejoin with a lost log).
func (s *Server) Start(wipe bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.p != nil {
		if !s.p.exited() {
			return ErrRunning
		}
		s.reapLocked() // it died on its own
	}
	if wipe {
		if err := s.kind.CanWipe(s); err != nil {
			return err
		}
		if err := s.wipeData(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := s.spawnLocked(ctx); err != nil {
		return err
	}
	return s.waitReadyLocked(ctx)
}

func (s *Server) wipeData() error {
	// A killed postmaster's shared memory segment is found through the
	// postmaster.pid in its data directory: remove it before the file goes.
	cleanupStaleShm(filepath.Dir(s.dir))
	if err := os.RemoveAll(s.dataDir()); err != nil {
		return fmt.Errorf("harness: %s: wipe: %w", s.name, err)
	}
	return nil
}

// Stop shuts the server down gracefully and waits until all its processes
// are gone. A paused server is resumed so it can shut down. After 30 s it is
// killed and Stop reports that.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(stopTimeout)
}

// Kill sends SIGKILL to the server's processes and waits until they are gone
// (reaped, or zombies of another parent). Writes the server acknowledged
// survive it, as they survive a process crash; servers skip fsync, so this is
// not a power cut: wipe on Start for lost state.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		s.reapLocked()
		return ErrNotRunning
	}
	return s.killLocked()
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing is
// answered, like a long GC pause or a frozen VM. It returns once the main
// process is stopped.
func (s *Server) Pause() error {
	return s.signalState(sigStop, func(st byte) bool { return st == 'T' || st == 't' })
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	return s.signalState(sigCont, func(st byte) bool { return st != 'T' && st != 't' })
}

func (s *Server) signalState(sig syscall.Signal, reached func(byte) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil || s.p.exited() {
		return ErrNotRunning
	}
	if sig == sigStop {
		s.freezeLocked()
	} else {
		signalAll(s.p, tree(s.p.pid), sig)
	}
	if !canSeeState {
		return nil
	}
	deadline := time.Now().Add(5 * time.Second)
	for !reached(procState(s.p.pid)) {
		if s.p.exited() {
			return ErrNotRunning
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("harness: %s: process did not react to %v", s.name, sig)
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's view; no event to wait on
	}
	return nil
}

// freezeLocked stops the main process first, so it forks no new child while
// the tree is listed, then every descendant. It returns the frozen pids.
func (s *Server) freezeLocked() []int {
	p := s.p
	p.cmd.Process.Signal(sigStop)
	if canSeeState {
		deadline := time.Now().Add(2 * time.Second)
		for st := procState(p.pid); st != 'T' && st != 't' && st != 0 && st != 'Z' && time.Now().Before(deadline); st = procState(p.pid) {
			time.Sleep(time.Millisecond) // polling the kernel's view; no event to wait on
		}
	}
	pids := tree(p.pid)
	signalAll(p, pids, sigStop)
	return pids
}

// signalAll signals the other pids, the process group, then the main process:
// once the main process is reaped its pid (and so its group id) may belong to
// someone else, so everything else goes first. The main process is signalled
// through os.Process, which never hits a recycled pid.
func signalAll(p *proc, pids []int, sig syscall.Signal) {
	if !p.exited() {
		for _, pid := range pids {
			if pid != p.pid {
				kill(pid, sig)
			}
		}
		kill(-p.pid, sig)
	}
	p.cmd.Process.Signal(sig)
}

// spawnLocked starts the process without waiting for readiness.
func (s *Server) spawnLocked(ctx context.Context) error {
	if err := s.kind.Prepare(ctx, s); err != nil {
		return fmt.Errorf("harness: %s: prepare: %w", s.name, err)
	}
	cmd, err := s.kind.Command(s)
	if err != nil {
		return fmt.Errorf("harness: %s: %w", s.name, err)
	}
	logf, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("harness: %s: %w", s.name, err)
	}
	defer logf.Close() // the child has its own copy
	from, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "=== %s fenceguard starts: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("harness: %s: %w", s.name, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{}), logFrom: from}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	s.p = p
	return nil
}

// waitReadyLocked polls the server's readiness check until it passes, the
// process exits or ctx ends. On failure the process is killed and the error
// carries the tail of this run's log.
func (s *Server) waitReadyLocked(ctx context.Context) error {
	p := s.p
	// A check must not outlive the process: a squatter on the port may accept
	// and never answer.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		select {
		case <-p.done:
			pcancel()
		case <-pctx.Done():
		}
	}()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var lastErr error
wait:
	for {
		actx, cancel := context.WithTimeout(pctx, 2*time.Second)
		lastErr = s.kind.Ready(actx, s, p.pid)
		cancel()
		if lastErr == nil && !p.exited() {
			return nil
		}
		select {
		case <-p.done:
			lastErr = fmt.Errorf("exited while starting: %v", p.waitErr)
			break wait
		case <-ctx.Done():
			lastErr = fmt.Errorf("not ready after %v: %v", StartTimeout, lastErr)
			break wait
		case <-tick.C:
		}
	}
	s.killLocked()
	tail := s.logTail(p.logFrom, 40)
	err := fmt.Errorf("harness: %s (%s): %v\n--- last lines of %s ---\n%s", s.name, s.Addr(), lastErr, s.logPath(), tail)
	if portInUse(tail) || errors.Is(lastErr, ErrPortTaken) {
		err = fmt.Errorf("%w: %w", ErrPortTaken, err)
	}
	return err
}

// stopLocked stops gracefully within timeout, then kills.
func (s *Server) stopLocked(timeout time.Duration) error {
	if s.p == nil || s.p.exited() {
		s.reapLocked()
		return ErrNotRunning
	}
	p := s.p
	pids := tree(p.pid)
	p.cmd.Process.Signal(s.kind.StopSignal())
	signalAll(p, pids, sigCont) // a paused server cannot act on it
	select {
	case <-p.done:
		s.p = nil
		return s.awaitGone(pids)
	case <-time.After(timeout):
		if err := s.killLocked(); err != nil {
			return err
		}
		return fmt.Errorf("harness: %s did not stop within %v and was killed", s.name, timeout)
	}
}

// killLocked SIGKILLs the server's whole process tree and waits until it is gone.
func (s *Server) killLocked() error {
	p := s.p
	if p == nil {
		return nil
	}
	if p.exited() { // died on its own; its pid may be recycled already
		s.p = nil
		return nil
	}
	pids := s.freezeLocked()
	signalAll(p, pids, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(goneTimeout):
		return fmt.Errorf("harness: %s: pid %d survived SIGKILL for %v", s.name, p.pid, goneTimeout)
	}
	s.p = nil
	return s.awaitGone(pids)
}

// awaitGone waits until none of pids is alive (PostgreSQL backends exit
// shortly after their postmaster), so a restart finds the port and the data
// directory free. Stragglers get SIGKILL (and SIGCONT, should they be frozen).
func (s *Server) awaitGone(pids []int) error {
	deadline := time.Now().Add(goneTimeout)
	kick := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			now := time.Now()
			if now.After(deadline) {
				return fmt.Errorf("harness: %s: pid %d still alive after %v", s.name, pid, goneTimeout)
			}
			if now.After(kick) {
				kill(pid, syscall.SIGKILL)
				kill(pid, sigCont)
			}
			time.Sleep(pollEvery) // polling the kernel's view; no event to wait on
		}
	}
	return nil
}

// reapLocked forgets a process that exited on its own.
func (s *Server) reapLocked() {
	if s.p != nil && s.p.exited() {
		s.p = nil
	}
}

// destroy ends the server for good and removes its directory. Idempotent.
func (s *Server) destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	defer unregister(s)
	var errs []error
	if s.p != nil {
		var err error
		if s.kind.GracefulTeardown() {
			err = s.stopLocked(10 * time.Second)
		} else {
			err = s.killLocked()
		}
		if err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, err)
		}
	}
	if pids := killUnder(s.dir); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("harness: %s: killed stray processes %v", s.name, pids))
	}
	cleanupStaleShm(filepath.Dir(s.dir))
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// logTail returns the last n lines written to the log since offset from.
func (s *Server) logTail(from int64, n int) string {
	f, err := os.Open(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size()-from > 64<<10 {
		from = st.Size() - 64<<10
	}
	f.Seek(from, io.SeekStart)
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pickPorts is FreePorts; tests replace it to hand out a taken port.
var pickPorts = FreePorts

// Create makes a server of kind k that is not started yet: it picks nports
// free ports (the first is the client port, a second one is PeerPort) and
// creates its directory, named prefix-N. Start it with [Server.Start]. The
// harness tears it down at the end of the package ([Main]); [Cleanup] does it
// at the end of a test. Backends use Create for clusters, whose members must
// know each other's ports before the first one starts; otherwise [Launch].
func Create(k Kind, prefix string, nports int) (*Server, error) {
	return newServer(k, prefix, nports)
}

func newServer(k Kind, prefix string, nports int) (*Server, error) {
	root, err := rootDir()
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	p, err := pickPorts(nports)
	if err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	name := prefix + "-" + strconv.FormatInt(seq.Add(1), 10)
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	s := &Server{kind: k, name: name, dir: dir, port: p[0]}
	if nports > 1 {
		s.peerPort = p[1]
	}
	if err := register(s); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Launch creates and starts a server of kind k (see [Create]), on new ports
// when another process took the chosen ones first, and returns once it is
// ready. On error nothing is left running.
func Launch(k Kind, prefix string, nports int) (*Server, error) {
	var err error
	for range 3 {
		var s *Server
		if s, err = newServer(k, prefix, nports); err != nil {
			return nil, err
		}
		if err = s.Start(false); err == nil {
			return s, nil
		}
		s.destroy()
		if !errors.Is(err, ErrPortTaken) {
			break
		}
	}
	return nil, err
}

// ChildEnv returns an environment for a server process: ours minus the
// variables with the given prefixes (etcd exits when ETCD_* duplicates a
// flag).
func ChildEnv(dropPrefixes ...string) []string {
	env := os.Environ()
	out := env[:0:0]
next:
	for _, kv := range env {
		for _, p := range dropPrefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
