package redlock

import (
	"embed"
	"io/fs"

	"github.com/redis/go-redis/v9"

	"github.com/fenceguard/fenceguard/locks/redislock/internal/lua"
)

// Per node, the keys of one lock share the hash tag {key}:
//
//	<prefix>{<key>}      the lock: "<grant id>" once taken, "<grant id>|<token>"
//	                     once the grant's token is written back; PX ttl
//	<prefix>{<key>}:tok  the node's token counter c and clock offset d, as
//	                     "c:d" ("c" when d is 0), PX counter idle time: one
//	                     key, so that they are kept or lost together
//
// and a release publishes on <prefix>{<key>}:wake.
//
// Tokens, counters and offsets are canonical decimal strings in
// 1..token.MaxInt64 and never pass through a Lua number (see
// internal/lua/decimal.lua). Minting (max + 1) and the clock floor
// (now + d) happen in Go, in uint64.

// counterErrPrefix starts the error reply of a script that found a
// malformed counter (counter.lua); the node's client turns it into a
// [*CounterError].
const counterErrPrefix = "FENCEGUARD_COUNTER "

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
// reply. Renew and release need no decimal helper and define none.
var (
	acquireScript   = redis.NewScript(source("decimal", "counter", "acquire"))
	writeBackScript = redis.NewScript(source("decimal", "counter", "writeback"))
	renewScript     = redis.NewScript(source("ours", "renew"))
	releaseScript   = redis.NewScript(source("ours", "release"))
	issuedScript    = redis.NewScript(source("decimal", "counter", "issued"))
	currentScript   = redis.NewScript(source("decimal", "counter", "current"))
	healScript      = redis.NewScript(source("decimal", "counter", "heal"))
)
