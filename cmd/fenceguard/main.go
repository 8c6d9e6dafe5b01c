package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/fenceguard/fenceguard/token"
)

// The environment variables that give --lock and --store their defaults.
const (
	envLock   = "FENCEGUARD_LOCK"
	envPrefix = "FENCEGUARD_PREFIX" // --prefix of run and token
	envStore  = "FENCEGUARD_STORE"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		// run handles the signals that would end it from its first
		// moment: one that comes while it starts ends its wait for the
		// lock like one that comes later, with its line on stderr.
		earlySignals = make(chan os.Signal, 8)
		signal.Notify(earlySignals, forwarded...)
	}
	os.Exit(mainCode(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// mainCode runs the program with args and returns its exit code.
func mainCode(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(context.Background())
	if err == nil {
		return exitOK
	}
	var s silentExit
	if errors.As(err, &s) {
		return int(s)
	}
	var e *exitError
	if !errors.As(err, &e) {
		// Cobra's own: an unknown command or flag, a wrong argument count.
		err = withCode(exitUsage, err)
	}
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	if exitCode(err) == exitUsage {
		msg += fmt.Sprintf(" (see %s --help)", cmd.CommandPath())
	}
	fmt.Fprintln(stderr, "fenceguard: "+msg)
	return exitCode(err)
}

func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return v + " (" + runtime.Version() + ")"
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "fenceguard",
		Short: "Run jobs under a distributed lock with a fencing token, and inspect or repair fences",
		Long: `fenceguard runs a command under a distributed lock (Redis, Redis Sentinel or
Cluster, Redlock, etcd, ZooKeeper), hands it the lock's fencing token in its
environment, and stops it when the lease is lost. It also reads and resets the
high-water marks fences keep, and tells a script a lock's current token.

Exit codes: 0 success; run passes its command's status through (128+N when a
signal N ended it); 64 bad usage; 65 token --check: not the current token;
69 lock service or store unreachable; 70 any other failure; 75 lock held by
another (run; see --conflict-exit-code); 77 lease lost while the command ran;
126 command not executable; 127 command not found.`,
		Version:       version(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetVersionTemplate("fenceguard {{.Version}}\n")
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return withCode(exitUsage, err) })
	root.AddCommand(newRunCmd(stderr), newTokenCmd(stdout, stderr), newFenceCmd(stdin, stdout, stderr))
	root.CompletionOptions.DisableDefaultCmd = true
	return root
}

// logger writes slog text lines to w at level.
func logger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelError
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// fromEnv gives a flag left unset the value of an environment variable.
func fromEnv(cmd *cobra.Command, flag, env string, dst *string) {
	if !cmd.Flags().Changed(flag) {
		*dst = os.Getenv(env)
	}
}

func newRunCmd(stderr io.Writer) *cobra.Command {
	var (
		o       runOptions
		verbose bool
	)
	cmd := &cobra.Command{
		Use:   "run --lock URL --key KEY [flags] -- CMD [ARGS...]",
		Short: "Run a command while holding a lock, with its fencing token in the environment",
		Long: `run takes the lock on KEY, runs CMD with the lock's fencing token in its
environment, keeps the lease alive while CMD runs, and releases the lock when
CMD exits. CMD sees:

  FENCING_TOKEN   the token of this grant (decimal); send it with every write
  FENCING_KEY     KEY
  FENCING_HEADER  X-Fencing-Token, the HTTP header fenced services read

and FENCEGUARD_LOCK and FENCEGUARD_PREFIX, for fenceguard token inside CMD.

CMD runs in a process group of its own. The signals HUP, INT, QUIT, TERM, USR1
and USR2 are passed on to that group; Ctrl-Z stops CMD and run together. When
the lease is lost (a renewal is refused, or the lease's deadline passes, as
after the whole machine froze), the group gets SIGTERM at once and SIGKILL
after --grace, the lock is released once CMD is gone, and run exits 77. Losing
the lease cannot be prevented; the token is what lets a fenced resource refuse
a write CMD sends too late. run is for jobs: a CMD that reads the terminal is
stopped by it (SIGTTIN). If run is killed, CMD is killed with it (Linux).

With --wait 0 (the default) run makes one attempt and exits 75 when another
holder has the lock, as flock -n does (with --conflict-exit-code 0 it exits 0
and prints nothing); --wait D waits up to D in the lock's queue.
--lock-delay D keeps a lock whose lease expired (not released) from
everybody for D more, protection for resources that cannot check a token:
--grace must be shorter, so CMD is gone before the next holder starts.

Lock URLs (--lock, default $FENCEGUARD_LOCK):
  redis://[[user]:pass@]host:port[/db]              one Redis (rediss:// for TLS)
  redis+sentinel://[[user]:pass@]h1:p,h2:p/MASTER[/db]  Redis behind Sentinel
  redis+cluster://[[user]:pass@]h1:p,h2:p           Redis Cluster
  redlock://[[user]:pass@]h1:p,h2:p,h3:p            Redlock over 3+ independent Redis
  etcd://[user:pass@]h1:p,h2:p                      etcd
  zk://[user:pass@]h1:p,h2:p                        ZooKeeper (digest auth)`,
		Example: `  # cron: at most one instance of the nightly job, on any machine
  fenceguard run --lock redis://10.0.0.5:6379 --key nightly-report -- ./report.sh

  # wait up to a minute for the lock; exit 0 instead of 75 when it stays held
  fenceguard run --lock etcd://10.0.0.7:2379 --key sku:lamp --wait 1m --conflict-exit-code 0 -- ./restock.sh

  # the job sends its token with its write; a fenced service refuses it once stale
  fenceguard run --lock zk://10.0.0.9:2181 --key sku:lamp --ttl 10s -- \
    sh -c 'curl -fsS -X POST -H "$FENCING_HEADER: $FENCING_TOKEN" http://inventory/items/lamp/sell'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("run: no command given: fenceguard run [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			fromEnv(cmd, "lock", envLock, &o.lock)
			fromEnv(cmd, "prefix", envPrefix, &o.prefix)
			o.log = logger(stderr, verbose)
			return runCmd(cmd.Context(), o, args)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // what follows CMD is CMD's
	f.StringVar(&o.lock, "lock", "", "lock service URL (default $"+envLock+")")
	f.StringVar(&o.key, "key", "", "the lock's key (required)")
	f.StringVar(&o.prefix, "prefix", "", "where the locks live in the lock service (default $"+envPrefix+", else the locker's own)")
	f.DurationVar(&o.ttl, "ttl", 15*time.Second, "lease TTL; the lease is renewed every TTL/3 while CMD runs; at least 1s")
	f.DurationVar(&o.wait, "wait", 0, "how long to wait for the lock; 0 makes one attempt")
	f.DurationVar(&o.lockDelay, "lock-delay", 0, "after a lease of this lock expires, grant it to nobody for this long (at most 1h)")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after the lease is lost, how long CMD has between SIGTERM and SIGKILL")
	f.DurationVar(&o.connectTimeout, "connect-timeout", 5*time.Second, "how long to try reaching the lock service before exiting 69")
	f.IntVar(&o.conflictExit, "conflict-exit-code", exitNotObtained, "exit code when the lock is held by another (like flock -E); with 0, run prints nothing then")
	f.BoolVarP(&verbose, "verbose", "v", false, "log to stderr what goes wrong on the way: failed renewals, retries, a failed release")
	return cmd
}

func newTokenCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		lock, key, prefix, check string
		asJSON, verbose          bool
		connectTimeout           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --lock URL --key KEY [--check N]",
		Short: "Print the lock's current fencing token, or check a token against it",
		Long: `token prints the fencing token of the lock's current grant: the current
holder's token; when nobody holds the lock, a number at least the last
grant's and below every later grant's. A job under fenceguard run (which
exports FENCEGUARD_LOCK and FENCEGUARD_PREFIX) can check, before it acts,
that no newer grant exists:

  fenceguard token --key "$FENCING_KEY" --check "$FENCING_TOKEN" || exit

--check N prints nothing and exits 0 when N is the current token, 65 when it is
not (a newer grant exists, or N was never granted). The check is a snapshot: a
grant can come right after it. Only a resource that checks the token itself
refuses a write that comes too late.`,
		Example: `  fenceguard token --lock redis://127.0.0.1:6379 --key sku:lamp
  fenceguard token --lock etcd://127.0.0.1:2379 --key sku:lamp --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fromEnv(cmd, "lock", envLock, &lock)
			fromEnv(cmd, "prefix", envPrefix, &prefix)
			if key == "" {
				return usageErrorf("token: --key is required")
			}
			var want token.Token
			if cmd.Flags().Changed("check") {
				t, err := token.Parse(check)
				if err != nil {
					return usageErrorf("token: --check: %v", err)
				}
				want = t
			}
			if connectTimeout <= 0 {
				return usageErrorf("token: --connect-timeout %v: must be positive", connectTimeout)
			}
			ep, err := lockEndpoint(lock)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := dial(ctx, ep, connectTimeout, logger(stderr, verbose))
			if err != nil {
				return err
			}
			defer c.Close()
			qctx, cancel := context.WithTimeout(ctx, connectTimeout)
			defer cancel()
			cur, err := c.sequencer(prefix).Current(qctx, key)
			if err != nil {
				return serviceError(ep.String(), err)
			}
			if want != 0 {
				if cur != want {
					return withCode(exitNotCurrent, fmt.Errorf("token %d is not the current token of %q: the lock stands at %d", want, key, cur))
				}
				return nil
			}
			if asJSON {
				return writeJSON(stdout, map[string]any{"key": key, "token": tokenString(cur)})
			}
			_, err = fmt.Fprintln(stdout, strconv.FormatUint(uint64(cur), 10))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&lock, "lock", "", "lock service URL (default $"+envLock+"; see fenceguard run --help)")
	f.StringVar(&key, "key", "", "the lock's key (required)")
	f.StringVar(&prefix, "prefix", "", "where the locks live in the lock service (default $"+envPrefix+", else the locker's own)")
	f.StringVar(&check, "check", "", "exit 0 if this token is the current one, 65 if not; print nothing")
	f.BoolVar(&asJSON, "json", false, `print {"key":..., "token":...}`)
	f.DurationVar(&connectTimeout, "connect-timeout", 5*time.Second, "how long to try reaching the lock service before exiting 69")
	f.BoolVarP(&verbose, "verbose", "v", false, "log the lock service client's warnings to stderr")
	return cmd
}

func newFenceCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	fence := &cobra.Command{
		Use:   "fence",
		Short: "Read or reset the high-water marks a fence keeps",
		Long: `fence reads and resets the high-water marks of fenced resources: the highest
token each resource has accepted.

Store URLs (--store, default $FENCEGUARD_STORE):
  postgres://user@host:port/db?sslmode=...   PostgreSQL: the high-water table
                                             (fence_tokens, or --tokens-table), or
                                             with --table, a table's token column;
                                             fence migrate creates them
  redis://..., redis+sentinel://..., redis+cluster://...   the Redis fence
  etcd://h1:p,...                            the etcd fence
  zk://h1:p,...                              the ZooKeeper fence
For Redis, etcd and ZooKeeper, --prefix is where the fence keeps its marks
(default: the fence's own).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("fence: name a subcommand: get, reset or migrate")
		},
	}
	var (
		o              storeOptions
		asJSON, yes    bool
		verbose        bool
		to             string
		connectTimeout = 5 * time.Second
	)
	addFlags := func(cmd *cobra.Command) {
		f := cmd.Flags()
		f.StringVar(&o.store, "store", "", "the store's URL (default $"+envStore+")")
		f.StringVar(&o.prefix, "prefix", "", "Redis, etcd, ZooKeeper: where the fence keeps its marks")
		f.StringVar(&o.tokensTable, "tokens-table", "", "PostgreSQL: the high-water table, [schema.]name (default fence_tokens)")
		f.StringVar(&o.table, "table", "", "PostgreSQL column mode: the guarded table, [schema.]name; the argument is a row's key")
		f.StringVar(&o.keyColumn, "key-column", "", "PostgreSQL column mode: the column that identifies a row")
		f.StringVar(&o.column, "column", "", "PostgreSQL column mode: the token column (default fence_token)")
		f.DurationVar(&o.connectTimeout, "connect-timeout", connectTimeout, "how long to try reaching the store before exiting 69")
		f.BoolVar(&asJSON, "json", false, "print JSON")
		f.BoolVarP(&verbose, "verbose", "v", false, "log the store client's warnings to stderr")
	}
	open := func(cmd *cobra.Command) (marks, string, func() error, error) {
		fromEnv(cmd, "store", envStore, &o.store)
		o.log = logger(stderr, verbose)
		o.audit = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		return openMarks(cmd.Context(), o)
	}
	get := &cobra.Command{
		Use:   "get --store URL [flags] RESOURCE",
		Short: "Print a resource's high-water mark (0: none)",
		Example: `  fenceguard fence get --store postgres://app@db/shop sku:lamp
  fenceguard fence get --store postgres://app@db/shop --table items --key-column sku lamp
  fenceguard fence get --store redis://127.0.0.1:6379 --json sku:lamp`,
		Args: exactlyOne("RESOURCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, desc, closeStore, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeStore()
			ctx, cancel := context.WithTimeout(cmd.Context(), o.connectTimeout)
			defer cancel()
			hw, err := m.HighWater(ctx, args[0])
			if err != nil {
				return serviceError(desc, err)
			}
			if asJSON {
				return writeJSON(stdout, map[string]any{"store": desc, "resource": args[0], "token": tokenString(hw)})
			}
			_, err = fmt.Fprintln(stdout, strconv.FormatUint(uint64(hw), 10))
			return err
		},
	}
	addFlags(get)
	reset := &cobra.Command{
		Use:   "reset --store URL --to N [flags] RESOURCE",
		Short: "Set a resource's high-water mark to N, by hand, audited",
		Long: `reset sets the high-water mark of exactly one resource to N, lower or
higher than it was: the way back for a resource whose mark a forged or
mistaken token poisoned, so that every honest holder is refused as stale. It
prints what it changed, and the store writes an audit record (on stderr).

Reset to the token of the lock's current grant (fenceguard token): the current
holder and every later one are accepted, every earlier one is still refused.
Resetting below a token a live holder has used lets an older holder back in.

On a terminal, reset asks for the resource's name to confirm; otherwise it
needs --yes.`,
		Example: `  fenceguard fence reset --store postgres://app@db/shop --to "$(fenceguard token --lock redis://10.0.0.5 --key sku:lamp)" sku:lamp`,
		Args:    exactlyOne("RESOURCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resource := args[0]
			if !cmd.Flags().Changed("to") {
				return usageErrorf("fence reset: --to N is required")
			}
			n, err := token.Parse(to)
			if err != nil {
				return usageErrorf("fence reset: --to: %v", err)
			}
			if n == 0 {
				return usageErrorf("fence reset: --to 0: a mark of zero would let in every holder ever refused")
			}
			if n > token.MaxInt64 {
				return usageErrorf("fence reset: --to %d: above every token a locker issues (%d); the resource would refuse every holder", n, token.MaxInt64)
			}
			if !yes && !isTerminal(stdin) {
				return usageErrorf("fence reset: stdin is not a terminal: give --yes to reset %q without confirmation", resource)
			}
			m, desc, closeStore, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeStore()
			if !yes {
				ctx, cancel := context.WithTimeout(cmd.Context(), o.connectTimeout)
				cur, err := m.HighWater(ctx, resource)
				cancel()
				if err != nil {
					return serviceError(desc, err)
				}
				if err := confirm(stdin, stderr, desc, resource, cur, n); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.connectTimeout)
			defer cancel()
			prev, err := m.Reset(ctx, resource, n)
			if err != nil {
				return serviceError(desc, err)
			}
			if asJSON {
				return writeJSON(stdout, map[string]any{"store": desc, "resource": resource, "previous": tokenString(prev), "token": tokenString(n)})
			}
			_, err = fmt.Fprintf(stdout, "%s: %d -> %d\n", resource, prev, n)
			return err
		},
	}
	addFlags(reset)
	reset.Flags().StringVar(&to, "to", "", "the mark to set (required; not 0)")
	reset.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	migrate := &cobra.Command{
		Use:   "migrate --store postgres://... [--tokens-table T | --table T --key-column C [--column C]]",
		Short: "Create or upgrade the PostgreSQL tables a fence keeps its marks in",
		Long: `migrate sets up PostgreSQL for fencing, as storage/postgres's Migrate
functions do: it creates the high-water table (fence_tokens, or --tokens-table)
unless it exists, with its trigger, and with --table adds the token column
(bigint not null default 0; --column, default fence_token) to that table,
taking a brief ACCESS EXCLUSIVE lock. It is idempotent: run it again after
upgrading fenceguard. Redis, etcd and ZooKeeper fences need no set-up.`,
		Example: `  fenceguard fence migrate --store postgres://app@db/shop
  fenceguard fence migrate --store postgres://app@db/shop --table items --key-column sku`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, desc, closeStore, err := open(cmd)
			if err != nil {
				return err
			}
			defer closeStore()
			mg, ok := m.(migrator)
			if !ok {
				_, err := fmt.Fprintf(stdout, "%s: nothing to set up\n", desc)
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			if err := mg.Migrate(ctx); err != nil {
				return serviceError(desc, err)
			}
			_, err = fmt.Fprintf(stdout, "%s: set up for fencing\n", desc)
			return err
		},
	}
	addFlags(migrate)
	fence.AddCommand(get, reset, migrate)
	return fence
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// confirm asks, on the terminal stdin is, for the resource's name.
func confirm(stdin io.Reader, stderr io.Writer, desc, resource string, cur, to token.Token) error {
	fmt.Fprintf(stderr, "%s: the mark of %q is %d. Set it to %d? Type the resource's name to confirm: ", desc, resource, cur, to)
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil || strings.TrimRight(line, "\r\n") != resource {
		return withCode(exitSoftware, errors.New("fence reset: not confirmed; nothing changed"))
	}
	return nil
}

func exactlyOne(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageErrorf("%s: want exactly one %s, got %d arguments", cmd.CommandPath()[len("fenceguard "):], name, len(args))
		}
		if args[0] == "" {
			return usageErrorf("%s: the %s is empty", cmd.CommandPath()[len("fenceguard "):], name)
		}
		return nil
	}
}

// tokenString is a token as JSON carries it: a decimal string, as the
// HTTP middleware writes it, for JSON numbers lose digits above 2^53 in
// most readers (jq, JavaScript).
func tokenString(t token.Token) string { return strconv.FormatUint(uint64(t), 10) }

func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
