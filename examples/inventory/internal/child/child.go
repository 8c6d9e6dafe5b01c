// Package child ties the processes the inventory command starts (the demo's
// workers, the services a load run drives) to the process that started
// them, so that none outlives it when it dies without stopping them.
//
// On Linux the kernel does it: a child gets SIGKILL when its parent dies
// (the parent-death signal). Other systems have no such signal; there the
// child watches for it instead: [Prepare] records the parent's pid in the
// child's environment, and [WatchParent], called by the child, ends its
// context once its parent pid changes (the child was re-parented, its
// parent is gone). A frozen child (SIGSTOP) cannot watch anything; when
// its parent dies, its process group — its own, see Prepare — is left
// orphaned with a stopped member, and POSIX has the kernel send that group
// SIGHUP and SIGCONT, which ends it.
package child

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// parentEnv holds the pid of the process that started this one with
// Prepare.
const parentEnv = "FENCEGUARD_INVENTORY_PARENT"

// Prepare makes cmd a child of this process that ends with it: it sets
// cmd.SysProcAttr when nil (with group, in a process group of its own, out
// of reach of the terminal's Ctrl-C, so the parent stops it itself) and
// adds the environment variable WatchParent looks for.
func Prepare(cmd *exec.Cmd, group bool) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = sysProcAttr(group)
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, parentEnv+"="+strconv.Itoa(os.Getpid()))
}

// WatchParent returns a context that ends when the process that started
// this one with Prepare is gone, on systems without a parent-death signal;
// elsewhere, and when this process was not started with Prepare, it is ctx
// with a cancel.
func WatchParent(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	parent, err := strconv.Atoi(os.Getenv(parentEnv))
	os.Unsetenv(parentEnv) // not for the processes this one starts
	if err != nil || !watch {
		return ctx, cancel
	}
	if os.Getppid() != parent {
		cancel() // gone before we looked
		return ctx, cancel
	}
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if os.Getppid() != parent {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
