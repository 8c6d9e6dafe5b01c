package redislock

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/token"
)

// CounterError reports a key whose token counter holds something this
// package did not write: not "token" or "token:offset" with both canonical
// decimal numbers in 1..[MaxToken] (someone else wrote the key). Every
// call that reads the counter fails with it — Acquire, TryAcquire, Heal,
// Issued, Current — and nothing is granted, until an operator deletes the
// key (its tokens then come from the clock; heal it to the resources'
// marks). A Release that would hand the lock over frees it instead and
// succeeds; the waiters it wakes fail with the CounterError. It unwraps to
// [token.ErrInvalid]: retrying does not help.
type CounterError struct {
	Key   string // the counter's Redis key
	Value string // the stored value, quoted, cut at 40 bytes
}

func (e *CounterError) Error() string {
	return "redislock: token counter " + e.Key + " holds " + e.Value + ", not a token (or token:offset) in 1..9223372036854775807"
}

// Unwrap returns [token.ErrInvalid].
func (e *CounterError) Unwrap() error { return token.ErrInvalid }

// counterReply is how the scripts' badCounter reply starts.
const counterReply = "ERR redislock: token counter "

// scriptErr gives a script's error reply about a malformed counter its
// type, a [*CounterError]; other errors pass unchanged.
func scriptErr(err error) error {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		return err
	}
	rest, ok := strings.CutPrefix(rerr.Error(), counterReply)
	if !ok {
		return err
	}
	key, val, ok := strings.Cut(rest, " holds ")
	if !ok {
		return err
	}
	if i := strings.LastIndex(val, ", not a token"); i >= 0 {
		val = val[:i]
	}
	return &CounterError{Key: key, Value: val}
}
