package redislock

import (
	"embed"
	"io/fs"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/lua"
)

// Keys of one lock, all sharing the hash tag {key} so they live in one
// cluster slot and a script may touch them together:
//
//	<prefix>{<key>}        the lock: "<grant id>|<token>", PX ttl + lock-delay
//	<prefix>{<key>}:tok    the token counter c and the heal offset d, as
//	                       "c" (d = 0) or "c:d", PX counter idle time (see
//	                       mint): one key, so that an eviction or an
//	                       expiry never takes one without the other
//	<prefix>{<key>}:q      waiters in arrival order (zset, score: server µs)
//	<prefix>{<key>}:qd     waiters' liveness deadlines (zset, score: server ms)
//
// (in this order, KEYS[1..4], in every script that names them: the
// scripts that read only the counter name the first two)
//
// and the channel <prefix>{<key>}:wake, on which a release publishes
// "<id>|<token>" of the waiter it handed the lock to.
//
// The lock's value names the grant exactly: the id is drawn afresh by each
// Acquire, and the token tells apart two grants to one waiting Acquire
// (handed the lock, lost it while paused, handed it again). Renew and
// Release compare the whole value; the token in it is what the Sequencer
// answers while the lock is held.
//
// Tokens never become Lua numbers (doubles, exact only below 2^53): they
// are canonical decimal strings, compared and incremented digit by digit
// (internal/lua/decimal.lua), but for the acquire's fast path, which
// compares a validated counter with the clock as numbers below 9·10^15,
// where doubles are exact. Stored values are validated before use; a
// counter that holds anything else fails the script. Nothing mints above
// MaxToken. Lua numbers serve only what is not a token: the clock in ms
// and µs, TTLs.

//go:embed lua/*.lua
var luaFiles embed.FS

// source assembles a script from the named chunks: "decimal" is the
// shared decimal.lua, the others are lua/<name>.lua.
func source(names ...string) string {
	fsys, err := fs.Sub(luaFiles, "lua")
	if err != nil {
		panic(err)
	}
	return lua.Source(fsys, names...)
}

// The scripts; each file's head comment gives its keys, arguments and
// reply. The acquire's and the release's uncontended paths run before any
// helper is defined: a script's chunk runs in full on every call, and
// each local function is a closure made anew.
var (
	acquireScript = redis.NewScript(source("acquire_fast", "decimal", "counter", "mint", "acquire"))
	tryAllScript  = redis.NewScript(source("decimal", "counter", "mint", "tryall"))
	renewScript   = redis.NewScript(source("renew"))
	releaseScript = redis.NewScript(source("release_fast", "decimal", "counter", "mint", "handover", "release"))
	abandonScript = redis.NewScript(source("decimal", "counter", "mint", "handover", "abandon"))
	healScript    = redis.NewScript(source("decimal", "counter", "heal"))
	issuedScript  = redis.NewScript(source("decimal", "counter", "heldtoken", "issued"))
	currentScript = redis.NewScript(masterOnly + source("decimal", "counter", "heldtoken", "current"))
	claimScript   = redis.NewScript(source("decimal", "claim"))
	resetScript   = redis.NewScript(source("reset"))
)
