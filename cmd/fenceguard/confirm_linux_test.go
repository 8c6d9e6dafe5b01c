package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fenceguard/fenceguard/locks/redislock"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// onTerminal runs the program with a terminal as stdin, types typed into
// it once the program has asked (stderr ends with ": "), and returns how
// it ended.
func onTerminal(t *testing.T, typed string, args ...string) result {
	t.Helper()
	master, tty := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout bytes.Buffer
	stderr := new(syncBuffer)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, &stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.HasSuffix(stderr.String(), ": ") {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt on stderr: %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := master.WriteString(typed + "\n"); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return r
}

// On a terminal, reset asks for the resource's name: typed, it resets;
// anything else changes nothing.
func TestFenceResetConfirmsOnATerminal(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t, time.Minute)
	rdb, redisURL, rc := redisDB(t)
	prefix := rdb.Prefix + "fence:"
	f := redislock.NewFence(rc, redislock.FenceOptions{Prefix: prefix})
	if err := f.Claim(ctx, "sku-1", 1000); err != nil {
		t.Fatal(err)
	}
	mark := func(want int) {
		t.Helper()
		if got, err := f.HighWater(ctx, "sku-1"); err != nil || int(got) != want {
			t.Fatalf("mark %d, %v; want %d", got, err, want)
		}
	}
	r := onTerminal(t, "sku-2", "fence", "reset", "--store", redisURL, "--prefix", prefix, "--to", "500", "sku-1")
	if r.code == 0 || r.stdout != "" {
		t.Fatalf("another name typed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	mark(1000)
	r = onTerminal(t, "sku-1", "fence", "reset", "--store", redisURL, "--prefix", prefix, "--to", "500", "sku-1")
	want(t, r, 0, "sku-1: 1000 -> 500\n")
	if !strings.Contains(r.stderr, "sku-1") {
		t.Fatalf("the prompt does not name the resource: %q", r.stderr)
	}
	mark(500)
}
