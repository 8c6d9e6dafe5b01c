package harness

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// tmpBase is where server directories live: PostgreSQL runs as the postgres
// user and must traverse every parent, which rules out a root-owned TMPDIR
// such as /root/tmp.
const tmpBase = "/tmp"

const (
	dirPrefix = "fenceguard-"
	lockName  = "owner.lock"
)

var mainCalled atomic.Bool

// registry holds everything this process started, so Main can stop it.
var registry struct {
	mu       sync.Mutex
	root     string               // per-process directory, created on first use
	lock     *os.File             // flocked while this process lives
	servers  map[*Server]struct{} // every live harness-started server
	stopping bool                 // Main's teardown has begun
}

// Main runs the package's tests, stops every server this package started and
// removes their directories, then fails the package if goroutines leaked
// (go.uber.org/goleak; opts are passed to it). Every test package that uses
// this package calls it:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
// Main also removes directories left by earlier test processes that died
// without cleaning up. On SIGINT or SIGTERM it stops the servers and exits
// (a second signal, or 15 s, ends the process anyway).
// Should the test binary die anyway, its servers die with it (they get SIGKILL
// when their parent dies, on Linux).
func Main(m *testing.M, opts ...goleak.Option) {
	mainCalled.Store(true)
	sweepStale(tmpBase)

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	quit := make(chan struct{})
	var sigDone sync.WaitGroup
	sigDone.Add(1)
	go func() {
		defer sigDone.Done()
		select {
		case sig := <-sigc:
			signal.Stop(sigc) // a second Ctrl-C kills at once
			fmt.Fprintf(os.Stderr, "harness: %v: stopping servers\n", sig)
			done := make(chan struct{})
			go func() { teardown(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second): // a hung test may hold a server
			}
			os.Exit(130)
		case <-quit:
		}
	}()

	code := 1
	if err := prepareExamples(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
	}

	signal.Stop(sigc)
	close(quit)
	sigDone.Wait()
	if err := teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: teardown: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// RequireMain stops a test early when its package forgot [Main]: its
// servers would outlive the tests and their directories would stay behind.
func RequireMain(t testing.TB) {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("harness: this test package must call harness.Main(m) from TestMain")
	}
}

// teardown stops all servers and removes the root directory.
func teardown() error {
	registry.mu.Lock()
	registry.stopping = true
	srvs := make([]*Server, 0, len(registry.servers))
	for s := range registry.servers {
		srvs = append(srvs, s)
	}
	registry.mu.Unlock()

	errc := make(chan error, len(srvs))
	var wg sync.WaitGroup
	for _, s := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- s.destroy()
		}()
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		if err != nil {
			errs = append(errs, err)
		}
	}

	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.root != "" {
		if pids := killUnder(registry.root); len(pids) > 0 {
			errs = append(errs, fmt.Errorf("harness: killed stray server processes %v", pids))
		}
		cleanupStaleShm(registry.root)
		if err := os.RemoveAll(registry.root); err != nil {
			errs = append(errs, err)
		}
		registry.lock.Close()
		registry.root, registry.lock = "", nil
	}
	return errors.Join(errs...)
}

// rootDir returns this process's directory under /tmp, creating it on first
// use. Its lock file tells later processes whether the owner still lives.
func rootDir() (string, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.root != "" {
		return registry.root, nil
	}
	dir, err := os.MkdirTemp(tmpBase, dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", err
	}
	// Traversable by the postgres user; each server's own dir decides the rest.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	// Lock first, then give the lock file its name: a sweeper only considers
	// directories with a named lock file, so it never sees ours unlocked.
	tmp := filepath.Join(dir, lockName+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = tryLock(f)
		if err == nil {
			err = os.Rename(tmp, filepath.Join(dir, lockName))
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	registry.root, registry.lock = dir, f
	return dir, nil
}

// sweepStale removes the directories of test processes that died without
// cleaning up (a crash, SIGKILL, a test timeout): their lock is free.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		if !strings.HasPrefix(filepath.Base(dir), dirPrefix) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, lockName))
		if err != nil {
			continue // not ours, or not yet set up
		}
		if tryLock(f) == nil {
			killUnder(dir)
			cleanupStaleShm(dir)
			os.RemoveAll(dir)
		}
		f.Close()
	}
}

func register(s *Server) error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.stopping {
		return errors.New("harness: tests are over, not starting another server")
	}
	if registry.servers == nil {
		registry.servers = map[*Server]struct{}{}
	}
	registry.servers[s] = struct{}{}
	return nil
}

func unregister(s *Server) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	delete(registry.servers, s)
}

// TempDir creates a directory of this test process's own, named by pattern
// as [os.MkdirTemp] names it, for what a TestMain prepares for the whole
// package (a program it builds, say). It lives in the directory the
// servers' directories live in: [Main] removes it when the tests end, and a
// later run of the harness removes it should the process die first.
func TempDir(pattern string) (string, error) {
	root, err := rootDir()
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(root, pattern)
}
