package harness

import (
	"context"
	"errors"
	"os"
	"sync"
)

// ErrNotInstalled is what a backend's start for a program returns, wrapped,
// when the machine has no local install of the server.
var ErrNotInstalled = errors.New("harness: not installed")

// programMu keeps LaunchProgram and Close from racing on the per-process
// directory: Close removes it when it empties, LaunchProgram creates it.
var programMu sync.Mutex

// LaunchProgram is [Launch] for a program rather than a test (the inventory
// demo): it needs no [Main]. The caller must call [Server.Close]. Should
// the program die first, the kernel kills the server (Linux parent-death
// signal) and the next run of the harness on the machine removes its
// directory. ctx is checked before the start and after it.
func LaunchProgram(ctx context.Context, k Kind, prefix string, nports int) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	programMu.Lock()
	defer programMu.Unlock()
	sweepStale(tmpBase)
	s, err := Launch(k, prefix, nports)
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

// Close stops the server and removes its directory, and, in a program
// without [Main], the process's directory under /tmp when no other server
// uses it. A test's servers are torn down by the harness; Close only does
// it early. It is idempotent.
func (s *Server) Close() error {
	err := s.destroy()
	if !mainCalled.Load() {
		programMu.Lock()
		defer programMu.Unlock()
		removeRootIfUnused()
	}
	return err
}

// removeRootIfUnused removes this process's directory when no server lives
// on, so that a program that started and closed a server leaves nothing
// under /tmp. A later server creates a new one.
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
