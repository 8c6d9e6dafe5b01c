package redlock

import "github.com/redis/go-redis/v9"

// Per node, the keys of one lock share the hash tag {key}:
//
//	<prefix>{<key>}      the lock: the holder's grant id, PX ttl
//	<prefix>{<key>}:tok  the node's token counter, PX counter idle time
//
// and a release publishes on <prefix>{<key>}:wake.
//
// Counters are server microseconds or a little above: exact as Lua doubles
// (below 2^53), and passed as decimal strings.

const timeNow = `
local t = redis.call('TIME')
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// acquireScript takes the node's lock if free and returns the node's
// clock-floored counter, max(counter, now in µs), without changing it.
//
// KEYS: lock, counter. ARGV: id, ttl ms.
// Returns {1, counter} when taken, {0, pttl, holder} when held by another.
var acquireScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]) or ''}
end
` + timeNow + `
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < nowus then c = nowus end
return {1, string.format('%.0f', c)}
`)

// writeBackScript raises the node's counter to the token, only while this
// grant holds the node's lock.
//
// KEYS: lock, counter. ARGV: id, token, counter idle ms.
// Returns 1 when written, 0 when the node's lock is not ours.
var writeBackScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
`)

// renewScript extends the node's lock only if it still holds this grant.
//
// KEYS: lock. ARGV: id, ttl ms. Returns 1 when extended, else 0.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes the node's lock only if it holds this grant, and
// wakes every waiter on the node.
//
// KEYS: lock. ARGV: id, channel. Returns 1 when released, else 0.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '*')
return 1
`)

// issuedScript returns max(counter, now in µs).
//
// KEYS: counter.
var issuedScript = redis.NewScript(timeNow + `
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < nowus then c = nowus end
return string.format('%.0f', c)
`)

// healScript raises the counter to at least ARGV[1].
//
// KEYS: counter. ARGV: target, counter idle ms.
var healScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < tonumber(ARGV[1]) then c = tonumber(ARGV[1]) end
redis.call('SET', KEYS[1], string.format('%.0f', c), 'PX', ARGV[2])
return 1
`)
