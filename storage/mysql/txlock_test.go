package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/storage/mysql"
)

// A fenced transaction holding one resource blocks no claim of another:
// the claim locks only the mark's own index record (no gap lock), under
// REPEATABLE READ as under READ COMMITTED, for existing marks and for new
// keys on either side of the held one.
func TestTxHoldsOnlyItsOwnMark(t *testing.T) {
	for _, level := range []string{"REPEATABLE-READ", "READ-COMMITTED"} {
		t.Run(level, func(t *testing.T) {
			db, marks := txSetup(t, mysql.TokensOptions{}, "isolation", level)
			ctx := ctxFor(t, time.Minute)
			for _, r := range []string{"k", "m", "p"} {
				if err := marks.Fence(db).Claim(ctx, r, 1); err != nil {
					t.Fatal(err)
				}
			}
			holding, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- marks.Tx(ctx, db, "m", 2, func(*sql.Tx) error { close(holding); <-release; return nil })
			}()
			<-holding
			for _, r := range []string{"k", "p", "a", "l", "n", "z"} {
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := marks.Tx(cctx, db, r, 2, func(*sql.Tx) error { return nil })
				cancel()
				if err != nil {
					t.Errorf("claim of %s while m is held: %v", r, err)
				}
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
