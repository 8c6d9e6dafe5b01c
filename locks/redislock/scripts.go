package redislock

import "github.com/redis/go-redis/v9"

// Keys of one lock, all sharing the hash tag {key} so they live in one
// cluster slot and a script may touch them together:
//
//	<prefix>{<key>}        the lock: "<grant id>|<token>", PX ttl
//	<prefix>{<key>}:tok    the token counter, PX counter idle time
//	<prefix>{<key>}:q      waiters in arrival order (zset, score: server µs)
//	<prefix>{<key>}:qd     waiters' liveness deadlines (zset, score: server ms)
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
// Numbers in Lua are doubles, exact only below 2^53. Tokens therefore never
// become Lua numbers: they are canonical decimal strings (no sign, no
// leading zero), compared by length and then digit by digit, and the
// counter is incremented as a string. Stored values are validated before
// use; a counter that holds anything else fails the script. The ceiling is
// MaxToken (2^63−1): nothing mints above it. Lua numbers are used only for
// what is not a token: the clock in ms (PX, deadlines), the clock in µs as
// a queue score, TTLs.

// A release with waiters queued hands the lock over directly: it grants
// it to the first live waiter — sets the lock key to "<waiter id>|<token>"
// for the waiter's TTL and mints the token — and publishes the same
// string. The waiter holds the lock the moment its wake-up arrives, without
// another round trip, and a newcomer cannot barge in ahead of the queue.
// (It can when a holder's lease expires without a release: then the first
// to try wins.) Queue members are "id|ttl ms", so the release knows the
// TTL.

// decimal holds the helpers on canonical decimal strings, and clock.
const decimal = `
local MAX = '9223372036854775807'
local MAXU64 = '18446744073709551615'

-- lt reports a < b for canonical decimal strings: the shorter is smaller;
-- of equal length, the first differing digit decides (bytes, not the
-- locale's collation).
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

-- canon reports whether s is a canonical decimal in 1..max.
local function canon(s, max)
  if type(s) ~= 'string' or not string.find(s, '^[1-9]%d*$') then return false end
  return not lt(max, s)
end

-- incr returns s + 1 for a canonical decimal string.
local function incr(s)
  local i = #s
  while i > 0 and string.byte(s, i) == 57 do i = i - 1 end -- trailing 9s
  if i == 0 then return '1' .. string.rep('0', #s) end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end

-- clock reads the server clock: ms and µs as Lua numbers (exact: far below
-- 2^53; used for expiry and queue order), and µs as a canonical decimal.
local function clock()
  local t = redis.call('TIME')
  local s, us = t[1], t[2]
  return tonumber(s) * 1000 + math.floor(tonumber(us) / 1000),
    tonumber(s) * 1000000 + tonumber(us),
    s .. string.rep('0', 6 - #us) .. us
end

local function badCounter(c)
  return redis.error_reply('ERR redislock: token counter ' .. KEYS[2] .. ' holds ' ..
    string.format('%q', string.sub(c, 1, 40)) .. ', not a token in 1..' .. MAX)
end
`

// mint sets the counter to the next token, max(counter + 1, now in µs),
// and returns it: usually one SET ... GET, as the clock is ahead of the
// counter. KEYS[2] the counter.
const mint = `
-- mint returns the new token, or nil and why not: 'range' when the
-- counter is at the ceiling, 'bad' when it holds something else than a
-- token (the counter's value third); then the counter is put back as it
-- was (its idle expiry restarted) and nothing is minted.
local function mint(nowstr, idle)
  local c = redis.call('SET', KEYS[2], nowstr, 'PX', idle, 'GET')
  if not c then return nowstr end
  if canon(c, MAX) then
    if lt(c, nowstr) then return nowstr end
    if c ~= MAX then
      local tok = incr(c)
      redis.call('SET', KEYS[2], tok, 'PX', idle)
      return tok
    end
    redis.call('SET', KEYS[2], c, 'PX', idle)
    return nil, 'range', c
  end
  redis.call('SET', KEYS[2], c, 'PX', idle)
  return nil, 'bad', c
end
`

// handOver releases the lock: it grants it to the first live waiter, whose
// wake-up carries the token, or deletes it when nobody waits. Waiters
// whose liveness deadline passed (they crashed or lost their connection
// without leaving the queue) are dropped first. When the counter cannot
// mint (at the ceiling), the lock is deleted and every waiter woken: their
// acquires then fail with the reason, and leave the queue.
//
// KEYS[1..4]; channel, idle (counter idle ms). Needs decimal and mint.
const handOver = `
local function handOver(channel, idle)
  local nowms, _, nowstr = clock()
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
  local id, ttl = string.match(nxt, '^(.*)|(%d+)$')
  if not id then
    redis.call('ZREM', KEYS[3], nxt)
    redis.call('ZREM', KEYS[4], nxt)
    redis.call('DEL', KEYS[1])
    return
  end
  local tok = mint(nowstr, idle)
  if not tok then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', channel, '*') -- rnotify.Everyone
    return
  end
  redis.call('ZREM', KEYS[3], nxt)
  redis.call('ZREM', KEYS[4], nxt)
  local v = id .. '|' .. tok
  redis.call('SET', KEYS[1], v, 'PX', ttl)
  redis.call('PUBLISH', channel, v)
end
`

// acquireScript takes the lock when it is free, minting the token in the
// same step: uncontended, that is GET, TIME, one SET ... GET on the counter
// and the lock's SET. A waiter
// (enqueue "1") that finds the lock granted to it by a release gets the
// token the lock holds; otherwise it joins or refreshes its place in the
// queue.
//
// KEYS: lock, counter, queue, deadlines.
// ARGV: id, ttl ms, counter idle ms, waiter TTL ms, enqueue ("1" or "0").
// Returns {1, token} when granted now; {2, token} when a release handed
// the lock over earlier; {0, ms until worth retrying, joined} when not
// granted, joined 1 if the waiter was not in the queue and joined it now;
// {3, counter} when the counter is at the ceiling (nothing granted). A
// counter that is not a token is an error reply.
var acquireScript = redis.NewScript(decimal + mint + `
local v = redis.call('GET', KEYS[1])
if not v then
  local _, _, nowstr = clock()
  local tok, why, c = mint(nowstr, ARGV[3])
  if not tok then
    if why == 'range' then return {3, c} end
    return badCounter(c)
  end
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok, 'PX', ARGV[2])
  if ARGV[5] == '1' then
    local m = ARGV[1] .. '|' .. ARGV[2]
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
  end
  return {1, tok}
end
if ARGV[5] ~= '1' then return {0, 0, 0} end
local mine = ARGV[1] .. '|'
if string.sub(v, 1, #mine) == mine then
  return {2, string.sub(v, #mine + 1)}
end
local nowms, nowus = clock()
local m = ARGV[1] .. '|' .. ARGV[2]
local joined = 0
if not redis.call('ZSCORE', KEYS[3], m) then
  redis.call('ZADD', KEYS[3], nowus, m)
  joined = 1
end
local wttl = tonumber(ARGV[4])
redis.call('ZADD', KEYS[4], nowms + wttl, m)
redis.call('PEXPIRE', KEYS[3], 2 * wttl)
redis.call('PEXPIRE', KEYS[4], 2 * wttl)
return {0, math.max(redis.call('PTTL', KEYS[1]), 0), joined}
`)

// renewScript extends the lock only if it still holds this grant.
//
// KEYS: lock. ARGV: "id|token", ttl ms. Returns 1 when extended, 0 when
// not held.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript releases the lock only if it still holds this grant,
// handing it over to the next waiter.
//
// KEYS: lock, counter, queue, deadlines. ARGV: "id|token", channel,
// counter idle ms. Returns 1 when released, 0 when not held.
var releaseScript = redis.NewScript(decimal + mint + handOver + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
handOver(ARGV[2], ARGV[3])
return 1
`)

// abandonScript undoes whatever an acquire that gave up may have left: its
// place in the queue, or a grant (by acquire or hand-over, with whatever
// token) whose news never reached it — handing the lock on.
//
// KEYS: lock, counter, queue, deadlines. ARGV: id, channel, counter idle
// ms, member ("id|ttl").
var abandonScript = redis.NewScript(decimal + mint + handOver + `
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[4])
local v = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. '|'
if v and string.sub(v, 1, #mine) == mine then handOver(ARGV[2], ARGV[3]) end
return 1
`)

// healScript raises the counter to at least ARGV[1] (a canonical decimal
// below MAX, or "0"), refreshing its idle expiry.
//
// KEYS: counter (as KEYS[2] of the other scripts: KEYS[1] is unused).
// ARGV: target, counter idle ms. Returns the counter ("0" when there is
// none and the target is 0).
var healScript = redis.NewScript(decimal + `
local c = redis.call('GET', KEYS[2])
if c and not canon(c, MAX) then return badCounter(c) end
if not c or lt(c, ARGV[1]) then c = ARGV[1] end
if c == '0' then return '0' end
redis.call('SET', KEYS[2], c, 'PX', ARGV[2])
return c
`)

// issuedScript returns an upper bound of every token granted for the key:
// the counter, or the server clock when that is larger (a counter that
// expired or was lost was at most the clock when it was last written).
//
// KEYS: lock (unused), counter. Returns the bound as a decimal string.
var issuedScript = redis.NewScript(decimal + `
local _, _, nowstr = clock()
local c = redis.call('GET', KEYS[2])
if not c then return nowstr end
if not canon(c, MAX) then return badCounter(c) end
if lt(nowstr, c) then return c end
return nowstr
`)

// currentScript is the Sequencer's answer: the token in the lock's value
// while it is held; else the counter, or the server clock when that is
// larger — at least every token granted so far and at most the next grant's
// (which is max(counter + 1, clock)).
//
// KEYS: lock, counter. Returns a decimal string.
var currentScript = redis.NewScript(masterOnly + decimal + `
local v = redis.call('GET', KEYS[1])
if v then
  local tok = string.match(v, '|(%d+)$')
  if tok and canon(tok, MAX) then return tok end
end
local _, _, nowstr = clock()
local c = redis.call('GET', KEYS[2])
if not c then return nowstr end
if not canon(c, MAX) then return badCounter(c) end
if lt(nowstr, c) then return c end
return nowstr
`)

// claimScript is the Fence's check-and-advance on canonical decimal
// strings (every uint64, beyond Lua's 2^53). An accepted claim always
// writes the mark, equal tokens included: acceptance is decided by a write
// on the master, so a replica answers READONLY instead of accepting from
// its possibly stale copy.
//
// KEYS: high-water. ARGV: token. Returns {1} when accepted, {0, current}
// when stale; an error reply when the mark holds something else than a
// token.
var claimScript = redis.NewScript(decimal + `
local cur = redis.call('GET', KEYS[1])
if cur then
  if not canon(cur, MAXU64) then
    return redis.error_reply('ERR redislock: fence mark ' .. KEYS[1] .. ' holds ' ..
      string.format('%q', string.sub(cur, 1, 40)) .. ', not a token')
  end
  if lt(ARGV[1], cur) then return {0, cur} end
end
redis.call('SET', KEYS[1], ARGV[1])
return {1}
`)

// resetScript sets the mark by hand, whatever it was.
//
// KEYS: high-water. ARGV: token. Returns the previous mark, "" when none.
var resetScript = redis.NewScript(`
local prev = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
return prev or ''
`)
