package main_test

import (
	"strings"
	"testing"
)

func TestVersionPrintsTheProgramName(t *testing.T) {
	t.Parallel()
	r := fenceguard(t, nil, "--version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "fenceguard ") {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}
