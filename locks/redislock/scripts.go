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

// A release with waiters queued hands the lock over directly: it grants
// it to the first live waiter — sets the lock key to the waiter's id for
// the waiter's TTL and mints its token — and publishes "id|token". The
// waiter holds the lock the moment its wake-up arrives, without another
// round trip, and a newcomer cannot barge in ahead of the queue. (It can
// when a holder's lease expires without a release: then the first to try
// wins.) Queue members are "id|ttl ms", so the release knows the TTL.

// timeNow reads the server clock: nowms, nowus, and nowstr (nowus as a
// canonical decimal string).
const timeNow = `
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowstr = t[1] .. string.format('%06d', tonumber(t[2]))
`

// mint sets the counter to max(counter + 1, now in µs) and returns the new
// token as a decimal string: usually one SET ... GET, as the clock is ahead
// of the counter. Needs timeNow; KEYS[2] the counter, idle its idle ms.
const mint = `
local function mint(idle)
  local prev = redis.call('SET', KEYS[2], nowstr, 'PX', idle, 'GET')
  if prev and tonumber(prev) >= nowus then
    local s = string.format('%.0f', tonumber(prev) + 1)
    redis.call('SET', KEYS[2], s, 'PX', idle)
    return s
  end
  return nowstr
end
`

// handOver releases the lock: it grants it to the first live waiter, whose
// wake-up carries the token, or deletes it when nobody waits. Waiters
// whose liveness deadline passed (they crashed or lost their connection
// without leaving the queue) are dropped first. Needs timeNow and mint;
// KEYS[3] queue, KEYS[4] deadlines, ARGV[2] the channel, idle the counter
// idle ms.
const handOver = `
local function handOver(idle)
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', nowms, 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', KEYS[3], unpack(dead))
    redis.call('ZREM', KEYS[4], unpack(dead))
  end
  local nxt = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not nxt then
    redis.call('DEL', KEYS[1])
    return
  end
  redis.call('ZREM', KEYS[3], nxt)
  redis.call('ZREM', KEYS[4], nxt)
  local id, ttl = string.match(nxt, '^(.*)|(%d+)$')
  if not id then
    redis.call('DEL', KEYS[1])
    return
  end
  redis.call('SET', KEYS[1], id, 'PX', ttl)
  redis.call('PUBLISH', ARGV[2], id .. '|' .. mint(idle))
end
`

// acquireScript takes the lock when it is free, minting the token in the
// same step: uncontended, that is SET NX, TIME and one SET ... GET. A
// waiter (enqueue "1") that finds the lock already granted to it by a
// release gets the current token; otherwise it joins or refreshes its
// place in the queue.
//
// KEYS: lock, counter, queue, deadlines.
// ARGV: id, ttl ms, counter idle ms, waiter TTL ms, enqueue ("1" or "0").
// Returns {1, token} when granted now, {2, token} when a release handed the
// lock over earlier, else {0, ms until worth retrying}.
var acquireScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
` + timeNow + mint + `
  if ARGV[5] == '1' then
    local m = ARGV[1] .. '|' .. ARGV[2]
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
  end
  return {1, mint(ARGV[3])}
end
if ARGV[5] ~= '1' then return {0, 0} end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {2, redis.call('GET', KEYS[2]) or '0'}
end
` + timeNow + `
local m = ARGV[1] .. '|' .. ARGV[2]
if not redis.call('ZSCORE', KEYS[3], m) then
  redis.call('ZADD', KEYS[3], nowus, m)
end
local wttl = tonumber(ARGV[4])
redis.call('ZADD', KEYS[4], nowms + wttl, m)
redis.call('PEXPIRE', KEYS[3], 2 * wttl)
redis.call('PEXPIRE', KEYS[4], 2 * wttl)
return {0, math.max(redis.call('PTTL', KEYS[1]), 0)}
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

// releaseScript releases the lock only if it still holds this grant's id,
// handing it over to the next waiter.
//
// KEYS: lock, counter, queue, deadlines. ARGV: id, channel, counter idle
// ms. Returns 1 when released, 0 when not held.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
` + timeNow + mint + handOver + `
handOver(ARGV[3])
return 1
`)

// abandonScript undoes whatever an acquire that gave up may have left: its
// place in the queue, or a grant (by acquire or hand-over) whose news never
// reached it — handing the lock on.
//
// KEYS: lock, counter, queue, deadlines. ARGV: id, channel, counter idle
// ms, member ("id|ttl").
var abandonScript = redis.NewScript(timeNow + mint + handOver + `
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[4])
if redis.call('GET', KEYS[1]) == ARGV[1] then handOver(ARGV[3]) end
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
