package harness_test

import (
	"testing"
	"time"

	"github.com/fenceguard/fenceguard/harness"
)

// Every test package that uses the harness has this TestMain.
func ExampleMain() {
	testMain := func(m *testing.M) { harness.Main(m) } // func TestMain(m *testing.M)
	_ = testMain
}

// Cut one client off a server without disturbing anyone else.
func ExampleNewProxy() {
	_ = func(t *testing.T, serverAddr string) {
		p := harness.NewProxy(t, serverAddr)
		// Point one client at p.Addr(), the others at serverAddr, then:
		p.Cut()     // this client's calls fail
		p.Restore() // and work again
	}
}

// A call given a deadline returns by it, give or take what the scheduler
// took from the test process after the deadline.
func ExampleLateness() {
	_ = func(t *testing.T, call func(deadline time.Time) error) {
		lat := harness.StartLateness(t)
		deadline := time.Now().Add(500 * time.Millisecond)
		call(deadline)
		if late := time.Since(deadline); late > lat.Allowance(100*time.Millisecond, deadline) {
			t.Errorf("returned %v after its deadline", late)
		}
	}
}
