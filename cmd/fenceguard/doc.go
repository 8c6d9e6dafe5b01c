// Fenceguard runs a command under a distributed lock, with the lock's
// fencing token in its environment, and stops it when the lease is lost;
// it also reads and resets the high-water marks that fences keep, and tells
// a script a lock's current token. It is for scheduled jobs written in
// shell as much as for Go programs: flock(1) across machines, with a token.
//
// Install it from a checkout of the repository, at its root (the
// workspace, go.work, resolves the other modules):
//
//	go install ./cmd/fenceguard
//
// It lands in $(go env GOPATH)/bin; cron's PATH is short, so a crontab
// names it by its full path.
//
// # Usage
//
//	fenceguard run   --lock URL --key KEY [--ttl 15s] [--wait 0] [--lock-delay 0] [--grace 10s]
//	                 [--prefix P] [--connect-timeout 5s] [--conflict-exit-code 75] [-v] -- CMD [ARGS...]
//	fenceguard token --lock URL --key KEY [--prefix P] [--check N] [--json]
//	fenceguard fence get     --store URL [--prefix P | --tokens-table T | --table T --key-column C [--column C]] [--json] RESOURCE
//	fenceguard fence reset   --store URL --to N [--yes] [same options] RESOURCE
//	fenceguard fence migrate --store postgres://... [--tokens-table T | --table T --key-column C [--column C]]
//
// Every command has --help with examples; --version prints the version.
// Errors go to stderr in one line that starts with "fenceguard: ".
//
// # Lock and store URLs
//
// --lock (default $FENCEGUARD_LOCK) picks the lock service by scheme:
//
//	redis://[[user]:pass@]host:port[/db]                  one Redis; rediss:// for TLS
//	redis+sentinel://[[user]:pass@]h1:p,h2:p/MASTER[/db]  Redis behind Sentinel
//	redis+cluster://[[user]:pass@]h1:p,h2:p               Redis Cluster
//	redlock://[[user]:pass@]h1:p,h2:p,h3:p                Redlock over 3 or more independent Redis servers
//	etcd://[user:pass@]h1:p,h2:p                          etcd
//	zk://[user:pass@]h1:p,h2:p                            ZooKeeper (digest auth)
//
// A host without a port gets the service's usual one. --store (default
// $FENCEGUARD_STORE) takes postgres:// (a pgx connection string) or the
// redis, etcd and zk schemes above. Query strings are refused, not ignored
// (options are flags), except in postgres:// URLs, whose options pgx reads.
// --prefix names where the keys live, for programs that set a locker's or
// fence's Prefix; the default is the library's ($FENCEGUARD_PREFIX for run
// and token).
//
// # run
//
// run takes the lock on KEY (with --wait 0, the default, one attempt; with
// --wait D, up to D in the lock's queue) and runs CMD with, added to its
// environment:
//
//	FENCING_TOKEN      the grant's fencing token, in decimal
//	FENCING_KEY        KEY
//	FENCING_HEADER     X-Fencing-Token
//	FENCEGUARD_LOCK    the --lock URL, and FENCEGUARD_PREFIX the --prefix,
//	                   so that fenceguard token inside CMD asks the same lock
//
// --ttl is from 1s to 24h. The first attempt is made whatever --wait is;
// when a wait runs out, run asks the lock service whether it still
// answers, and exits 69 rather than 75 when it does not. With
// --conflict-exit-code 0, a lock held by another is a quiet success: run
// prints nothing (cron mails any output). The command line is visible to
// every user (ps): give credentials in $FENCEGUARD_LOCK rather than in
// --lock. run passes the URL on to CMD, credentials included.
//
// CMD runs in a process group of its own, with run's stdin, stdout and
// stderr. HUP, INT, QUIT, TERM, USR1 and USR2 sent to run are passed on to
// CMD's group (the terminating ones followed by CONT, so that a stopped CMD
// acts on them). Ctrl-Z (TSTP) stops CMD's group and then run, and CONT
// continues both. The lease is renewed every TTL/3 while CMD runs. When
// CMD exits, what it left running in its group (a shell's background job)
// gets TERM, and KILL after --grace; then run releases the lock and exits
// with CMD's status.
//
// What run cannot supervise: a process CMD moved out of its group (setsid,
// a shell's "set -m" jobs) outlives it, with or without the lock. Should
// run itself be killed (SIGKILL, the OOM killer), CMD gets SIGKILL with it
// on Linux, but what CMD started keeps running, as do CMD and its children
// elsewhere; should run alone be stopped (SIGSTOP, a debugger, a cgroup
// freezer on run only), CMD runs on while nothing renews the lease. In
// both cases another holder may be granted the lock while they act: the
// token is what refuses their writes. CMD's group is not the terminal's
// foreground group: a CMD that reads the terminal is stopped (SIGTTIN) and
// holds the lock until run is signalled; run is for jobs, not interactive
// programs.
//
// When the lease is lost — a renewal is refused, or its deadline passes
// without a renewal, as when the whole machine was frozen — run sends
// SIGTERM to CMD's group at once and SIGKILL after --grace, kills what is
// left of the group, releases the lock, and exits 77. It exits 77 too when
// it sees CMD's end only after the lease's deadline (run and CMD frozen
// together, CMD thawed first): CMD may have acted without the lock. A
// frozen job can still act in the moment between waking and being
// stopped: only a resource that
// checks FENCING_TOKEN refuses what it sends then. For resources that
// cannot, --lock-delay D makes the lock service grant a lock whose lease
// expired to nobody for D more (see docs/design.md, "Lock-delay"); --grace
// must then be shorter than D, so that CMD is gone before the next holder
// starts: when the lease's deadline plus nine tenths of the delay comes
// first, the KILL comes then. The lock is released only once CMD is gone.
//
// # token
//
// token prints the token of the lock's current grant: the holder's; when
// nobody holds the lock, a number at least the last grant's token and below
// every later grant's (token.Sequencer's Current: on Redis a value the
// clock floors, on etcd a revision), so "N equals it" means "N is the
// current holder's". --check N prints nothing and
// exits 0 when N is that token, 65 (saying on stderr where the lock
// stands) when it is not: a script can check
// "$FENCING_TOKEN" before an action it cannot fence. The answer may be
// stale by the time the script acts.
//
// # fence
//
// fence get prints a resource's high-water mark, 0 when it has none.
// fence reset sets it to N (not 0), whatever it was — the way back for a
// mark a forged token poisoned — names exactly one resource, prints
// "RESOURCE: OLD -> N", and the store writes an audit record to stderr. On a
// terminal it asks for the resource's name to confirm; otherwise it needs
// --yes. Reset to the lock's current token (fenceguard token): the current
// holder and later ones are accepted, earlier ones still refused. With
// --table and --key-column, PostgreSQL resources are the rows of a table in
// column mode (storage/postgres Table), named by their key. fence migrate
// creates the PostgreSQL tables (the high-water table, and with --table
// the token column) as storage/postgres's Migrate functions do; the other
// stores need no set-up. JSON output carries tokens as decimal strings, as
// the HTTP middleware does: JSON numbers lose digits above 2^53 in most
// readers.
//
// # Exit status
//
//	0        success
//	1-255    run: CMD's own exit status; 128+N when signal N ended it
//	64       bad usage: flags, arguments or URL
//	65       token --check: not the current token
//	69       the lock service or store is unreachable
//	70       any other failure
//	75       run: the lock is held by another holder (--conflict-exit-code changes it)
//	77       run: the lease was lost while CMD ran, or had run out when CMD's end was seen
//	126      run: CMD is not executable
//	127      run: CMD was not found
//
// fenceguard's own codes can also be CMD's; when run ends with its own,
// it says why on stderr.
package main
