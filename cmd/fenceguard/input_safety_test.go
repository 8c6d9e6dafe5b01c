//go:build unix

package main_test

import (
	"context"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness/pgserver"
	"github.com/fenceguard/fenceguard/harness/redisserver"
	"github.com/fenceguard/fenceguard/storage/postgres"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestRunExitStatusIsTheCommandsOrItsOwn: a command that cannot be found or
// run gets 127 or 126 with one line on stderr; the command's own status,
// even one of fenceguard's codes, passes through silently; a command ended by
// signal N gives 128+N.
func TestRunExitStatusIsTheCommandsOrItsOwn(t *testing.T) {
	t.Parallel()
	ls := redisURL(t)
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  []string
		code int
		own  bool // fenceguard says why on stderr
	}{
		{[]string{filepath.Join(dir, "missing")}, 127, true},
		{[]string{"fenceguard-no-such-command"}, 127, true},
		{[]string{notExec}, 126, true},
		{[]string{dir}, 126, true},
		{[]string{"sh", "-c", "exit 3"}, 3, false},
		{[]string{"sh", "-c", "exit 77"}, 77, false},
		{[]string{"sh", "-c", "exit 75"}, 75, false},
		{[]string{"sh", "-c", "exit 69"}, 69, false},
		{[]string{"sh", "-c", "kill -KILL $$"}, 137, false},
		{[]string{"sh", "-c", "kill -TERM $$"}, 143, false},
	} {
		res := fenceguard(t, quickExit, join(run(ls.args...), append([]string{"--key", "codes", "--"}, tc.cmd...)...)...)
		if res.code != tc.code {
			t.Errorf("%q: exit %d, want %d; stderr %q", tc.cmd, res.code, tc.code, res.stderr)
		}
		if tc.own {
			checkOwnLine(t, strings.Join(tc.cmd, " "), res)
		} else if res.stderr != "" {
			t.Errorf("%q: the command's own status, yet stderr %q", tc.cmd, res.stderr)
		}
	}
}

// TestUsageErrorsExit64AndTakeNoLock: bad flags and flag values are refused
// with 64 and one line, before the lock is taken and the command run.
func TestUsageErrorsExit64AndTakeNoLock(t *testing.T) {
	t.Parallel()
	ls := redisURL(t)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"--key", "u"},
		{"--key", "u", "--"},
		{"--", "touch", marker},
		{"--key", "", "--", "touch", marker},
		{"--key", "u", "--ttl", "0", "--", "touch", marker},
		{"--key", "u", "--ttl", "-5s", "--", "touch", marker},
		{"--key", "u", "--ttl", "1ns", "--", "touch", marker},
		{"--key", "u", "--ttl", "abc", "--", "touch", marker},
		{"--key", "u", "--grace", "0", "--", "touch", marker},
		{"--key", "u", "--grace", "-1s", "--", "touch", marker},
		{"--key", "u", "--lock-delay", "1s", "--", "touch", marker},
		{"--key", "u", "--lock-delay", "1s", "--grace", "1s", "--", "touch", marker},
		{"--key", "u", "--lock-delay", "2h", "--grace", "1s", "--", "touch", marker},
		{"--key", "u", "--lock-delay", "-1s", "--grace", "1s", "--", "touch", marker},
		{"--key", "u", "--wait", "-1s", "--", "touch", marker},
		{"--key", "u", "--connect-timeout", "0", "--", "touch", marker},
		{"--key", "u", "--conflict-exit-code", "256", "--", "touch", marker},
		{"--key", "u", "--conflict-exit-code", "-1", "--", "touch", marker},
		{"--key", "u", "--no-such-flag", "--", "touch", marker},
	} {
		res := fenceguard(t, quickExit, join(run(ls.args...), args...)...)
		if res.code != 64 {
			t.Errorf("run %q: exit %d, want 64; stderr %q", args, res.code, res.stderr)
		}
		checkOwnLine(t, strings.Join(args, " "), res)
	}
	for _, args := range [][]string{
		{"no-such-command"},
		{"run", "--lock", "foo://127.0.0.1", "--key", "u", "--", "touch", marker},
		{"run", "--lock", ls.url + "?db=1", "--key", "u", "--", "touch", marker},
		{"run", "--lock", ls.url + "/x", "--key", "u", "--", "touch", marker},
		{"run", "--lock", "redis://", "--key", "u", "--", "touch", marker},
		{"run", "--lock", "redis://127.0.0.1:99999", "--key", "u", "--", "touch", marker},
		{"run", "--lock", "redlock://127.0.0.1:1,127.0.0.1:2", "--key", "u", "--", "touch", marker},
		{"run", "--lock", "redis+sentinel://127.0.0.1:1", "--key", "u", "--", "touch", marker},
		{"token", "--lock", ls.url, "--prefix", ls.prefix},
	} {
		res := fenceguard(t, join(quickExit, "FENCEGUARD_LOCK="), args...)
		if res.code != 64 {
			t.Errorf("%q: exit %d, want 64; stderr %q", args, res.code, res.stderr)
		}
		checkOwnLine(t, strings.Join(args, " "), res)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a command ran after a usage error")
	}
	if res := fenceguard(t, quickExit, join(run(ls.args...), "--key", "u", "--", "true")...); res.code != 0 {
		t.Errorf("after the usage errors, the lock is not free: exit %d; stderr %q", res.code, res.stderr)
	}
}

// TestURLErrorsNeverShowThePassword: whatever is wrong with a URL that
// carries a password, or with the service behind it, the message shows the
// URL with the password masked.
func TestURLErrorsNeverShowThePassword(t *testing.T) {
	t.Parallel()
	closed := closedAddr(t)
	const secret = "S3cr3tPw"
	for _, tc := range []struct {
		url  string
		code int
	}{
		{"redis://u:" + secret + "%zz@127.0.0.1:6379", 64},          // bad escape in the password
		{"redis://u:" + secret + "@127.0.0.1:99999", 64},            // bad port
		{"redis://u:" + secret + "@127.0.0.1:6379/abc", 64},         // bad database
		{"redis://u:" + secret + "@:6379", 64},                      // no host name
		{"redis://u:" + secret + "@", 64},                           // no host
		{"redis://u:" + secret + "@127.0.0.1:6379?x=1", 64},         // query string
		{"redis://u:" + secret + "@127.0.0.1:6379#f", 64},           // fragment
		{"redis://u:" + secret + "%2F%3F%23@" + closed, 69},         // escaped / ? # in the password
		{"redis://:" + secret + "@" + closed, 69},                   // password only
		{"rediss://u:" + secret + "@" + closed, 69},                 // TLS
		{"redis+sentinel://u:" + secret + "@" + closed + "/m", 69},  // Sentinel
		{"redis+sentinel://u:" + secret + "@" + closed, 64},         // Sentinel without master
		{"redis+cluster://u:" + secret + "@" + closed, 69},          // Cluster
		{"redlock://u:" + secret + "@" + closed + "," + closed, 64}, // too few nodes
		{"redlock://u:" + secret + "@" + closed + "," + closed + "," + closed, 69},
		{"etcd://u:" + secret + "@" + closed, 69},
		{"zk://u:" + secret + "@" + closed, 69},
	} {
		for _, args := range [][]string{
			{"run", "--lock", tc.url, "--connect-timeout", "500ms", "--key", "k", "--", "true"},
			{"token", "--lock", tc.url, "--connect-timeout", "500ms", "--key", "k"},
		} {
			t.Run("", func(t *testing.T) {
				t.Parallel()
				res := fenceguard(t, quickExit, args...)
				if res.code != tc.code {
					t.Errorf("%s %s: exit %d, want %d; stderr %q", args[0], tc.url, res.code, tc.code, res.stderr)
				}
				checkOwnLine(t, tc.url, res)
				if strings.Contains(res.stderr+res.stdout, secret) {
					t.Errorf("%s %s: the password shows: %q", args[0], tc.url, res.stderr)
				}
			})
		}
	}
	for _, tc := range []struct {
		url  string
		code int
	}{
		{"postgres://u:" + secret + "%zz@127.0.0.1:5432/db", 64},
		{"postgres://u:" + secret + "@" + closed + "/db", 69},
		{"redis://u:" + secret + "@" + closed, 69},
	} {
		res := fenceguard(t, quickExit, "fence", "get", "--store", tc.url, "--connect-timeout", "500ms", "r")
		if res.code != tc.code {
			t.Errorf("fence get %s: exit %d, want %d; stderr %q", tc.url, res.code, tc.code, res.stderr)
		}
		checkOwnLine(t, tc.url, res)
		if strings.Contains(res.stderr+res.stdout, secret) {
			t.Errorf("fence get %s: the password shows: %q", tc.url, res.stderr)
		}
	}
}

// TestOddURLsNeverPanic runs the program on made-up URLs: each ends with a
// documented status and, when it fails, one line on stderr; never a panic.
func TestOddURLsNeverPanic(t *testing.T) {
	t.Parallel()
	closed := closedAddr(t)
	rng := rand.New(rand.NewSource(1))
	schemes := []string{"redis", "rediss", "redis+sentinel", "redis+cluster", "redlock", "etcd", "zk", "postgres", "", "REDIS"}
	seps := []string{"://", ":/", ":", "//", ""}
	parts := []string{"u", "p", "@", ":", "/", "[", "]", "%", "%2", "%zz", "::1", "127.0.0.1", "1", "65535", "99999", "0",
		",", "?", "#", "é", "\n", " ", "-", "..", "\\", "{", "}", closed, "[::1]", "\t", "\x7f"}
	for i := 0; i < 40; i++ {
		var b strings.Builder
		b.WriteString(schemes[rng.Intn(len(schemes))])
		b.WriteString(seps[rng.Intn(len(seps))])
		for n := rng.Intn(8); n > 0; n-- {
			b.WriteString(parts[rng.Intn(len(parts))])
		}
		u := b.String()
		args := []string{"token", "--connect-timeout", "300ms", "--lock", u, "--key", "k"}
		if i%2 == 1 {
			args = []string{"fence", "get", "--connect-timeout", "300ms", "--store", u, "r"}
		}
		res := fenceguard(t, join(quickExit, "FENCEGUARD_LOCK=", "FENCEGUARD_STORE="), args...)
		switch res.code {
		case 0, 64, 69, 70:
		default:
			t.Errorf("%q: exit %d; stderr %q", args, res.code, res.stderr)
		}
		if res.code != 0 {
			checkOwnLine(t, u, res)
		}
		if strings.Contains(res.stderr, "panic") || strings.Contains(res.stderr, "goroutine ") {
			t.Errorf("%q: panicked: %s", args, res.stderr)
		}
	}
}

// TestOddKeysAreLockedAndPassedVerbatim locks keys with braces, slashes,
// newlines, control characters, non-ASCII letters and 10 kB: the command sees
// its key exactly in FENCING_KEY, and keys that differ only by those
// characters are different locks.
func TestOddKeysAreLockedAndPassedVerbatim(t *testing.T) {
	t.Parallel()
	keys := []string{"{x}", "}x", "a/b", "/a", "a/", "//", "a/../b", ".", "..", "nl\nkey", "ключ✓", "\x01ctl", "sp ace",
		"*", `a\b`, "-x", "a%2Fb", strings.Repeat("k", 10000)}
	eachLockService(t, func(t *testing.T, ls lockURL) {
		dir := t.TempDir()
		for i, key := range keys {
			out := filepath.Join(dir, "key")
			res := fenceguard(t, quickExit, join(run(ls.args...), "--key", key, "--", "sh", "-c", `printf %s "$FENCING_KEY" > "$0"`, out)...)
			if res.code != 0 {
				t.Errorf("key %d %.40q: exit %d; stderr %.300q", i, key, res.code, res.stderr)
				continue
			}
			got, err := os.ReadFile(out)
			if err != nil || string(got) != key {
				t.Errorf("key %d %.40q: FENCING_KEY %.40q (%v)", i, key, got, err)
			}
		}
		for _, pair := range [][2]string{{"a", "a/b"}, {"a/b", "a"}, {"a/b", "a%2Fb"}, {"a/b", "a_b"}, {"x", "x:tok"}, {"x", "{x}"}} {
			started := filepath.Join(dir, "started")
			os.Remove(started)
			holder := start(t, join(run(ls.args...), "--key", pair[0], "--", "sh", "-c", `touch "$0"; sleep 1`, started)...)
			waitForFile(t, started)
			if res := fenceguard(t, quickExit, join(run(ls.args...), "--key", pair[1], "--", "true")...); res.code != 0 {
				t.Errorf("holding %q, taking %q: exit %d, want 0; stderr %q", pair[0], pair[1], res.code, res.stderr)
			}
			if res := holder.wait(); res.code != 0 {
				t.Errorf("holding %q: exit %d; stderr %q", pair[0], res.code, res.stderr)
			}
		}
	}, onRedis, onEtcd, onZK)
}

// TestTokenCheckRefusesMalformedTokens: --check takes the token's wire form
// only (decimal, no sign, no leading zero, not 0, fits 64 bits); anything else
// is a usage error, and a well-formed token that is not the lock's is 65.
func TestTokenCheckRefusesMalformedTokens(t *testing.T) {
	t.Parallel()
	ls := redisURL(t)
	for _, n := range []string{"", "abc", "-1", "+5", "0", "01", " 5", "5 ", "0x10", "1e3", "٣", "18446744073709551616", "99999999999999999999999"} {
		res := fenceguard(t, quickExit, join([]string{"token"}, append(ls.args, "--key", "t", "--check", n)...)...)
		if res.code != 64 || res.stdout != "" {
			t.Errorf("--check %q: exit %d, stdout %q, want 64 and nothing; stderr %q", n, res.code, res.stdout, res.stderr)
		}
		checkOwnLine(t, n, res)
	}
	for _, n := range []string{"1", "9223372036854775808", "18446744073709551615"} {
		res := fenceguard(t, quickExit, join([]string{"token"}, append(ls.args, "--key", "t", "--check", n)...)...)
		if res.code != 65 || res.stdout != "" {
			t.Errorf("--check %q: exit %d, stdout %q, want 65 and nothing; stderr %q", n, res.code, res.stdout, res.stderr)
		}
	}
}

// store is a fence store of the test's own.
type store struct {
	name string
	args []string // --store URL and the options that name the test's share
}

func postgresStore(t *testing.T) store {
	db := pgserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return store{"postgres", []string{"--store", db.DSN}}
}

// TestFenceResetChangesNothingWithoutConfirmation: without --yes and without
// a terminal, with --to 0 or a malformed --to, or with more than one
// resource, reset refuses and the mark stays; with --yes it sets the mark
// and says what it changed. fence get of an unknown resource is 0.
func TestFenceResetChangesNothingWithoutConfirmation(t *testing.T) {
	t.Parallel()
	for _, open := range []struct {
		name string
		open func(*testing.T) store
	}{
		{"postgres", postgresStore},
		{"redis", func(t *testing.T) store {
			db := redisserver.Shared(t)
			return store{"redis", []string{"--store", "redis://" + db.Addr, "--prefix", db.Prefix}}
		}},
		{"etcd", func(t *testing.T) store {
			ls := etcdURL(t)
			return store{"etcd", []string{"--store", ls.url, "--prefix", ls.prefix}}
		}},
		{"zk", func(t *testing.T) store {
			ls := zkURL(t)
			return store{"zk", []string{"--store", ls.url, "--prefix", ls.prefix}}
		}},
	} {
		t.Run(open.name, func(t *testing.T) {
			t.Parallel()
			st := open.open(t)
			get := func(resource string) string {
				t.Helper()
				res := fenceguard(t, quickExit, join([]string{"fence", "get"}, append(st.args, resource)...)...)
				if res.code != 0 {
					t.Fatalf("%s: fence get %q: exit %d; stderr %q", st.name, resource, res.code, res.stderr)
				}
				return strings.TrimSpace(res.stdout)
			}
			reset := func(args ...string) result {
				t.Helper()
				return fenceguard(t, quickExit, join([]string{"fence", "reset"}, append(append([]string{}, st.args...), args...)...)...)
			}
			if got := get("never-fenced"); got != "0" {
				t.Errorf("%s: fence get of an unknown resource: %q, want 0", st.name, got)
			}
			if res := reset("--to", "7", "--yes", "r"); res.code != 0 || res.stdout != "r: 0 -> 7\n" {
				t.Fatalf("%s: reset --yes: exit %d, stdout %q; stderr %q", st.name, res.code, res.stdout, res.stderr)
			}
			for _, args := range [][]string{
				{"--to", "9", "r"}, // no --yes, stdin not a terminal
				{"--to", "0", "--yes", "r"},
				{"--to", "-9", "--yes", "r"},
				{"--to", "09", "--yes", "r"},
				{"--to", "9x", "--yes", "r"},
				{"--to", "", "--yes", "r"},
				{"--to", "18446744073709551616", "--yes", "r"},
				{"--yes", "r"},
				{"--to", "9", "--yes", "r", "s"},
				{"--to", "9", "--yes"},
			} {
				res := reset(args...)
				if res.code != 64 {
					t.Errorf("%s: reset %q: exit %d, want 64; stderr %q", st.name, args, res.code, res.stderr)
				}
				checkOwnLine(t, strings.Join(args, " "), res)
			}
			if got := get("r"); got != "7" {
				t.Fatalf("%s: a refused reset changed the mark: %s, want 7", st.name, got)
			}
			if got := get("s"); got != "0" {
				t.Fatalf("%s: a refused reset changed another mark: %s, want 0", st.name, got)
			}
			if _, err := exec.LookPath("script"); err != nil {
				return
			}
			// On a terminal (script(1) gives reset one): only the resource's
			// exact name confirms.
			for _, tc := range []struct {
				typed, want string
			}{{"wrong\n", "7"}, {"\n", "7"}, {"r \n", "7"}, {"R\n", "7"}, {"r\n", "5"}} {
				cmd := exec.Command("script", "-qec", shellQuote(append([]string{bin, "fence", "reset"}, append(append([]string{}, st.args...), "--to", "5", "r")...)), "/dev/null")
				cmd.Env = append(os.Environ(), quickExit...)
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond)
				stdin.Write([]byte(tc.typed))
				time.Sleep(300 * time.Millisecond)
				stdin.Write([]byte{4}) // end of input on the terminal
				stdin.Close()
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					cmd.Process.Kill()
					<-done
					t.Fatalf("%s: reset on a terminal, typing %q: still background after 30 s", st.name, tc.typed)
				}
				if got := get("r"); got != tc.want {
					t.Errorf("%s: typing %q at the prompt: mark %s, want %s", st.name, tc.typed, got, tc.want)
				}
			}
		})
	}
}

// shellQuote quotes args for sh.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
