package faults

import (
	"bytes"
	"flag"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The attacks: the nemeses the cells above never had — the fence stores'
// replication, the number range, a hostile client, a holder frozen inside a
// transaction, a waiter frozen while it is handed the lock, keys whose
// equal values print differently. Each attack runs rounds against real
// servers, fenced and, on the same servers under the same fault, a control
// that lacks the defence (the code before it, or the defence switched off):
// the fenced side must accept no stale or forged write and lock no honest
// holder out, and the control must show the violation at least once, or
// the attack proved nothing and fails.
//
// An attack registers itself from its file's init with registerAttack.

var (
	flagAttacks = flag.String("faults.attacks", "", "run only the attacks (name, e.g. \"lag/zk\") this regexp matches")
	flagScale   = flag.Int("faults.scale", 1, "play this many times each attack's rounds (its -short rounds with -short)")
)

// attack is one nemesis against one target.
type attack struct {
	Name   string // "lag/zk": nemesis/target, as in the table
	About  string // one line for the table: what the fault and the control are
	Rounds int    // default rounds
	Short  int    // rounds with -short
	Run    func(t *testing.T, s *attackStats)
}

var (
	attacksMu sync.Mutex
	attacks   []attack
)

func registerAttack(a attack) {
	attacksMu.Lock()
	defer attacksMu.Unlock()
	attacks = append(attacks, a)
}

// attackStats counts one attack. Only the attack's goroutines write it,
// through its methods; the summary reads it after the attack ended.
type attackStats struct {
	mu       sync.Mutex
	rounds   int // rounds to play: the attack's Run reads it with Rounds()
	Name     string
	About    string
	Runs     int // rounds played
	Faults   int // faults injected, or seen to bite (stale reads, forged tokens sent, SIGSTOPs, delayed wake-ups)
	Attempts int // stale or forged writes the fenced side was asked to accept
	Refused  int // of those, refused
	Accepted int // of those, accepted: a violation
	Lockouts int // honest writes the fenced side refused that it had to accept: a violation
	Control  int // violations the control showed (must be > 0)
	Duration time.Duration
	Failed   bool
}

// Rounds is how many rounds the attack plays.
func (s *attackStats) Rounds() int { return s.rounds }

// Add counts under the lock: s.Add(func(s *attackStats) { s.Faults++ }).
func (s *attackStats) Add(f func(*attackStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// TestAttacks runs every registered attack, each a subtest named by it,
// then checks and prints the table; with -faults.doc it writes the table
// into docs/reliability.md between its own markers.
func TestAttacks(t *testing.T) {
	var pick *regexp.Regexp
	if *flagAttacks != "" {
		var err error
		if pick, err = regexp.Compile(*flagAttacks); err != nil {
			t.Fatalf("-faults.attacks: %v", err)
		}
	}
	attacksMu.Lock()
	list := slices.Clone(attacks)
	attacksMu.Unlock()
	slices.SortFunc(list, func(a, b attack) int { return strings.Compare(a.Name, b.Name) })

	start, load := time.Now(), loadavg()
	var all []*attackStats
	t.Run("group", func(t *testing.T) {
		for _, a := range list {
			if pick != nil && !pick.MatchString(a.Name) {
				continue
			}
			s := &attackStats{Name: a.Name, About: a.About, rounds: a.Rounds}
			if testing.Short() && a.Short > 0 {
				s.rounds = a.Short
			}
			s.rounds *= max(*flagScale, 1)
			all = append(all, s)
			t.Run(a.Name, func(t *testing.T) {
				t.Parallel()
				began := time.Now()
				defer func() { s.Duration = time.Since(began) }()
				a.Run(t, s)
				s.mu.Lock()
				defer s.mu.Unlock()
				if s.Accepted > 0 {
					t.Errorf("fenced: %d of %d stale or forged writes accepted", s.Accepted, s.Attempts)
				}
				if s.Lockouts > 0 {
					t.Errorf("fenced: %d honest writes refused (locked out)", s.Lockouts)
				}
				if s.Control == 0 && !t.Failed() && !t.Skipped() {
					t.Errorf("the control showed no violation in %d rounds: the attack did not bite, so it proves nothing", s.Runs)
				}
				if s.Refused+s.Accepted != s.Attempts {
					t.Errorf("counts do not add up: %d refused + %d accepted != %d attempts", s.Refused, s.Accepted, s.Attempts)
				}
				s.Failed = t.Failed()
				t.Logf("%s: %d rounds, %d faults, %d/%d refused, %d accepted, %d lockouts, control %d",
					s.Name, s.Runs, s.Faults, s.Refused, s.Attempts, s.Accepted, s.Lockouts, s.Control)
			})
		}
	})
	if len(all) == 0 {
		return
	}
	t.Logf("attacks (%v)\n%s", time.Since(start).Round(time.Second), attacksMarkdown(all))
	if *flagDoc != "" && !t.Failed() && pick == nil {
		var b bytes.Buffer
		fmt.Fprintf(&b, "Produced %s by\n\n```sh\n%s\n```\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), commandLine())
		fmt.Fprintf(&b, "on %d CPUs (%s, %s; load before: %s), in %v for the attacks.\n\n",
			runtime.NumCPU(), runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH, load,
			time.Since(start).Round(time.Second))
		b.WriteString(attacksHeader + "\n\n")
		b.WriteString(attacksMarkdown(all))
		if err := replaceBlock(*flagDoc, attacksBegin, attacksEnd, b.String()); err != nil {
			t.Errorf("-faults.doc: %v", err)
		}
	}
}

const attacksHeader = "*Faults*: faults injected or seen to bite (stale reads from a lagging member, forged tokens sent, processes frozen, wake-ups delayed). " +
	"*Attempts*: stale or forged writes put to the fenced side; *refused* of those, *accepted* (must be 0). " +
	"*Lockouts*: honest writes the fenced side refused (must be 0). " +
	"*Control*: violations shown by the same attack on the control, the code without the defence (must be above 0)."

// Markers of the attacks' generated part of docs/reliability.md.
const (
	attacksBegin = "<!-- BEGIN generated by integration/faults TestAttacks (-faults.doc); do not edit by hand -->"
	attacksEnd   = "<!-- END generated attacks -->"
)

func attacksMarkdown(all []*attackStats) string {
	var b bytes.Buffer
	b.WriteString("| attack | fault and control | rounds | faults | attempts | refused | accepted | lockouts | control | time |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range all {
		failed := ""
		if s.Failed {
			failed = " FAILED"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %.0fs%s |\n",
			s.Name, s.About, s.Runs, s.Faults, s.Attempts, s.Refused, s.Accepted, s.Lockouts, s.Control, s.Duration.Seconds(), failed)
	}
	return b.String()
}
