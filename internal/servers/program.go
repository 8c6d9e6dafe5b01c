package servers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
)

// ErrNotInstalled is what [StartPostgres] returns, wrapped, when the machine
// has no local PostgreSQL install (initdb and postgres) to start.
var ErrNotInstalled = errors.New("servers: not installed")

// programMu keeps StartPostgres and Close from racing on the per-process
// directory: Close removes it when it empties, StartPostgres creates it.
var programMu sync.Mutex

// StartPostgres starts a throwaway PostgreSQL server for a program rather
// than a test — the inventory demo — the way the tests get theirs: initdb in
// a new directory under /tmp, on a free loopback port, as the postgres user
// when the caller is root (PostgreSQL refuses to run as root). [Server.DSN]
// gives its connection string (user postgres, trust authentication,
// loopback only).
//
// The caller must call [Server.Close], which stops the server and removes
// its directory. Should the program die first, the kernel kills the server
// (Linux parent-death signal) and the next StartPostgres or test run on the
// machine removes the directory. StartPostgres does not need [Main], and
// the fault methods work on its server as on any other.
//
// It fails with an error wrapping [ErrNotInstalled] when there is no local
// install; environment endpoints are not considered. ctx is
// checked before the start and after it; the start itself takes at most a
// minute.
func StartPostgres(ctx context.Context) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if pgBinDir() == "" {
		return nil, fmt.Errorf("%w: PostgreSQL (initdb and postgres, Debian package postgresql)", ErrNotInstalled)
	}
	k, err := newPGKind()
	if err != nil {
		return nil, err
	}
	programMu.Lock()
	defer programMu.Unlock()
	sweepStale(tmpBase)
	s, err := launch(k, "postgres", 1)
	if err != nil {
		removeRootIfUnused()
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		s.destroy()
		removeRootIfUnused()
		return nil, err
	}
	return s, nil
}

// Close stops the server and removes its directory, and then the process's
// directory under /tmp if no other server uses it. It is meant for servers
// from [StartPostgres]; a test's servers are torn down by the harness, and
// Close only does it early. It is idempotent.
func (s *Server) Close() error {
	err := s.destroy()
	programMu.Lock()
	defer programMu.Unlock()
	removeRootIfUnused()
	return err
}

// removeRootIfUnused removes this process's directory when no server lives
// on, so that a program
// that started and closed a server leaves nothing under /tmp. A later
// server creates a new one.
func removeRootIfUnused() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.root == "" || len(registry.servers) > 0 {
		return
	}
	ents, err := os.ReadDir(registry.root)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.Name() != lockName {
			return // something not ours to judge: keep it
		}
	}
	if os.RemoveAll(registry.root) == nil {
		registry.lock.Close()
		registry.root, registry.lock = "", nil
	}
}
