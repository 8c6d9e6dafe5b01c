package itest

import (
	"context"
	"errors"
	"testing"

	"github.com/fenceguard/fenceguard/locks/redislock"
	"github.com/fenceguard/fenceguard/token"
)

// CheckSequencer asks seq about key n times and fails on any answer other
// than want (the holder's token) unless it is an ErrReplica refusal when
// refusals are allowed; it then runs a SequencerCheck for a forged token
// just above the holder's, which must be refused. It returns how many
// answers came and how many refusals.
func CheckSequencer(t testing.TB, ctx context.Context, name string, seq token.Sequencer, key string, want token.Token, n int) (answers, refusals int) {
	t.Helper()
	for range n {
		got, err := seq.Current(ctx, key)
		switch {
		case err == nil && got == want:
			answers++
		case err == nil:
			t.Errorf("%s: Current = %d, the holder's token is %d (a stale answer: a forged token in between passes SequencerCheck)", name, got, want)
			return
		case errors.Is(err, redislock.ErrReplica):
			refusals++
		default:
			t.Errorf("%s: Current: %v (want the token or ErrReplica)", name, err)
			return
		}
	}
	chk := token.SequencerCheck(seq, token.SequencerOptions{CacheSize: -1})
	if err := chk.Check(ctx, key, want+1); err == nil {
		t.Errorf("%s: SequencerCheck admitted forged token %d above the holder's %d", name, want+1, want)
	}
	return answers, refusals
}
