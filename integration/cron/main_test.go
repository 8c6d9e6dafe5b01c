package cron

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/fenceguard/fenceguard/harness"
	"github.com/fenceguard/fenceguard/integration/internal/itest"
)

// The programs the tests run, built by TestMain from the workspace, with
// the race detector when the tests have it.
var fenceguardBin, inventoryBin string

func TestMain(m *testing.M) {
	if err := build(); err != nil {
		fmt.Fprintln(os.Stderr, "cron: building the programs under test:", err)
		os.Exit(1)
	}
	itest.Main(m)
}

func build() error {
	dir, err := harness.TempDir("cron-")
	if err != nil {
		return err
	}
	fenceguardBin = filepath.Join(dir, "fenceguard")
	inventoryBin = filepath.Join(dir, "inventory")
	errc := make(chan error, 2)
	for _, b := range []struct{ out, pkg string }{
		{fenceguardBin, "github.com/fenceguard/fenceguard/cmd/fenceguard"},
		{inventoryBin, "github.com/fenceguard/fenceguard/examples/inventory"},
	} {
		go func() {
			args := []string{"build", "-o", b.out}
			if raceEnabled {
				args = append(args, "-race")
			}
			cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, b.pkg)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				errc <- fmt.Errorf("go build %s: %v: %s", b.pkg, err, out)
				return
			}
			errc <- nil
		}()
	}
	return errors.Join(<-errc, <-errc)
}
