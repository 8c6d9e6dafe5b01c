package pgserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"

	"github.com/fenceguard/fenceguard/harness"
)

// NewStandby starts a hot standby of primary (a server from [New]) for the
// calling test alone: a base backup of primary (pg_basebackup -R, so it
// streams from primary from then on) served read-only. It returns once the
// standby accepts connections, and is torn down when the test ends. [DSN]
// gives its connection string. Reads on it lag primary by the replication
// delay; writes fail with PostgreSQL's read-only error. Start(true) takes
// a fresh base backup.
func NewStandby(t testing.TB, primary *harness.Server) *harness.Server {
	t.Helper()
	harness.RequireMain(t)
	base, ok := primary.Kind().(*pgKind)
	if !ok {
		t.Fatalf("pgserver: NewStandby: %s is not a PostgreSQL server from New", primary.Name())
	}
	s, err := harness.Launch(&standbyKind{pgKind: base, primary: primary}, "postgres-standby", 1)
	if err != nil {
		t.Fatal(err)
	}
	harness.Cleanup(t, s)
	return s
}

// standbyKind is a PostgreSQL server made from a base backup of primary.
type standbyKind struct {
	*pgKind
	primary *harness.Server
}

func (k *standbyKind) Prepare(ctx context.Context, s *harness.Server) error {
	if k.attr != nil {
		if err := os.Chown(s.Dir(), k.uid, k.gid); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(s.DataDir(), "PG_VERSION")); err == nil {
		return nil
	}
	host, port, _ := net.SplitHostPort(k.primary.Addr())
	tool := pgTool(k.bin, "pg_basebackup")
	if tool == "" {
		return fmt.Errorf("no pg_basebackup next to %s, on PATH or in /usr/lib/postgresql/*/bin", k.bin)
	}
	cmd := exec.CommandContext(ctx, tool,
		"-h", host, "-p", port, "-U", "postgres", "-D", s.DataDir(),
		"-R", "-X", "stream", "--no-sync", "--checkpoint=fast")
	cmd.Dir = "/" // the postgres user may not enter our working directory
	cmd.SysProcAttr = k.pgKind.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup from %s: %w\n%s", k.primary.Name(), err, out)
	}
	return nil
}

func (k *standbyKind) Command(s *harness.Server) (*exec.Cmd, error) {
	cmd, err := k.pgKind.Command(s)
	if err != nil {
		return nil, err
	}
	cmd.Args = append(cmd.Args, "-c", "hot_standby=on")
	return cmd, nil
}

// pgTool finds a PostgreSQL program: next to the server's binaries (their
// real directory, should they be links), on PATH, or in Debian's
// directory of the newest version.
func pgTool(bin, name string) string {
	dirs := []string{bin}
	if real, err := filepath.EvalSymlinks(filepath.Join(bin, "postgres")); err == nil {
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExec(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs, _ = filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExec(p) {
			return p
		}
	}
	return ""
}
