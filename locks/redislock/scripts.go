package redislock

import "github.com/redis/go-redis/v9"

// Keys of one lock, all sharing the hash tag {key} so they live in one
// cluster slot and a script may touch them together:
//
//	<prefix>{<key>}        the lock: the holder's grant id, PX ttl
//	<prefix>{<key>}:tok    the token counter, PX counter idle time
//	<prefix>{<key>}:q      waiters in arrival order (zset, score: server µs)
//	<prefix>{<key>}:qd     waiters' liveness deadlines (zset, score: server ms)
//
// and the channel <prefix>{<key>}:wake, on which a release publishes the id
// of the waiter whose turn it is.
//
// Numbers in Lua are doubles. Tokens here are server microseconds (about
// 2^50.6 in 2026), exact below 2^53; Heal refuses targets above that. They
// travel as decimal strings, never as Lua numbers rendered by tostring.

// purgeDead removes waiters whose liveness deadline passed (they crashed or
// lost their connection without leaving the queue). Needs nowms.
const purgeDead = `
local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', nowms, 'LIMIT', 0, 100)
if #dead > 0 then
  redis.call('ZREM', KEYS[3], unpack(dead))
  redis.call('ZREM', KEYS[4], unpack(dead))
end
`

// wakeNext publishes the id of the first waiter, if any, on ARGV[2].
const wakeNext = `
local nxt = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if nxt then redis.call('PUBLISH', ARGV[2], nxt) end
`

const timeNow = `
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// mint sets the counter to the new token, max(counter + 1, now in µs), and
// returns it as a decimal string. Needs nowus.
const mint = `
local function mint()
  local tok = nowus
  local c = tonumber(redis.call('GET', KEYS[2]) or '0')
  if c >= tok then tok = c + 1 end
  local s = string.format('%.0f', tok)
  redis.call('SET', KEYS[2], s, 'PX', ARGV[3])
  return s
end
`

// enqueue puts ARGV[1] in the queue (keeping its place if it has one),
// refreshes its liveness deadline, and returns {0, wait}.
const enqueue = `
local function enqueue(wait)
  if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    redis.call('ZADD', KEYS[3], nowus, ARGV[1])
  end
  local ttl = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[4], nowms + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[3], 2 * ttl)
  redis.call('PEXPIRE', KEYS[4], 2 * ttl)
  return {0, math.max(wait, 0)}
end
`

// acquireScript takes the lock when it is free and nobody is ahead in the
// queue, minting the token in the same step. With nobody queued (the
// common case) it is SET NX plus the counter update.
//
// KEYS: lock, counter, queue, deadlines.
// ARGV: id, ttl ms, counter idle ms, waiter TTL ms, enqueue ("1" or "0").
// Returns {1, token} when granted, else {0, ms until worth retrying}.
var acquireScript = redis.NewScript(timeNow + mint + enqueue + `
if redis.call('EXISTS', KEYS[3]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, mint()}
  end
else
` + purgeDead + `
  if redis.call('EXISTS', KEYS[1]) == 0 then
    local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if head == nil or head == ARGV[1] then
      if head then
        redis.call('ZREM', KEYS[3], ARGV[1])
        redis.call('ZREM', KEYS[4], ARGV[1])
      end
      redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
      return {1, mint()}
    end
    -- Free, but another waiter's turn: wait for it, at most until its
    -- liveness deadline drops it from the queue.
    if ARGV[5] ~= '1' then return {0, 0} end
    local d = redis.call('ZSCORE', KEYS[4], head)
    if not d then
      -- A waiter without a liveness deadline is a leftover: drop it.
      redis.call('ZREM', KEYS[3], head)
      return enqueue(0)
    end
    return enqueue(tonumber(d) - nowms)
  end
end
if ARGV[5] ~= '1' then return {0, 0} end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then pttl = tonumber(ARGV[4]) end
return enqueue(pttl)
`)

// renewScript extends the lock only if it still holds this grant's id.
//
// KEYS: lock. ARGV: id, ttl ms. Returns 1 when extended, 0 when not held.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes the lock only if it still holds this grant's id, and
// wakes the next waiter.
//
// KEYS: lock, counter (unused), queue, deadlines. ARGV: id, channel.
// Returns 1 when released, 0 when not held.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
` + timeNow + purgeDead + wakeNext + `
end
return 1
`)

// abandonScript undoes whatever an acquire that gave up may have left: its
// place in the queue, or a grant whose reply never arrived. It wakes the
// next waiter when the lock is free.
//
// KEYS: lock, counter (unused), queue, deadlines. ARGV: id, channel.
var abandonScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
` + timeNow + purgeDead + wakeNext + `
end
return 1
`)

// healScript raises the counter to at least ARGV[1].
//
// KEYS: counter. ARGV: target, counter idle ms. Returns the counter.
var healScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local target = tonumber(ARGV[1])
if c < target then c = target end
local s = string.format('%.0f', c)
redis.call('SET', KEYS[1], s, 'PX', ARGV[2])
return s
`)

// claimScript is the Fence's check-and-advance. Tokens are compared as
// canonical decimal strings (longer is larger; equal lengths compare
// lexically), so every uint64 works, beyond Lua's 2^53.
//
// KEYS: high-water. ARGV: token. Returns {1} when accepted, {0, current}
// when stale.
var claimScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and (#cur > #ARGV[1] or (#cur == #ARGV[1] and cur > ARGV[1])) then
  return {0, cur}
end
if cur ~= ARGV[1] then redis.call('SET', KEYS[1], ARGV[1]) end
return {1}
`)

// issuedScript returns an upper bound of every token granted for the key:
// the counter, or the server clock when that is larger (a counter that
// expired or was lost was at most the clock when it was last written).
//
// KEYS: counter. Returns the bound as a decimal string.
var issuedScript = redis.NewScript(timeNow + `
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c < nowus then c = nowus end
return string.format('%.0f', c)
`)
