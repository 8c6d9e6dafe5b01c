package redislock

import "github.com/redis/go-redis/v9"

// Keys of one lock, all sharing the hash tag {key} so they live in one
// cluster slot and a script may touch them together:
//
//	<prefix>{<key>}        the lock: "<grant id>|<token>", PX ttl
//	<prefix>{<key>}:tok    the token counter, PX counter idle time
//	<prefix>{<key>}:tokd   the heal offset d, PX counter idle time (see mint)
//	<prefix>{<key>}:q      waiters in arrival order (zset, score: server µs)
//	<prefix>{<key>}:qd     waiters' liveness deadlines (zset, score: server ms)
//
// (in this order, KEYS[1..5], in every script that names them: the
// scripts that read only the counter name the first three)
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
// counter is incremented as a string. (One exception, for speed: the
// acquire compares a validated counter with the clock as numbers when
// both are below 9·10^15 < 2^53, where doubles are exact; the token stays
// a string. See acquireScript.) Stored values are validated before
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

-- add returns a + b for canonical decimal strings (or '0'), digit by
-- digit: exact at any length (the sum of two tokens has at most 20 digits).
local function add(a, b)
  local r, carry = {}, 0
  local i, j = #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local x = carry
    if i > 0 then x = x + string.byte(a, i) - 48 end
    if j > 0 then x = x + string.byte(b, j) - 48 end
    if x >= 10 then x, carry = x - 10, 1 else carry = 0 end
    r[#r + 1] = string.char(48 + x)
    i, j = i - 1, j - 1
  end
  local s = string.gsub(string.reverse(table.concat(r)), '^0+', '')
  if s == '' then return '0' end
  return s
end

-- sub returns a − b for canonical decimal strings with b < a (canonical:
-- no leading zeros).
local function sub(a, b)
  local r, borrow = {}, 0
  local i, j = #a, #b
  while i > 0 do
    local x = string.byte(a, i) - 48 - borrow
    if j > 0 then x = x - (string.byte(b, j) - 48) end
    if x < 0 then x, borrow = x + 10, 1 else borrow = 0 end
    r[#r + 1] = string.char(48 + x)
    i, j = i - 1, j - 1
  end
  local s = string.gsub(string.reverse(table.concat(r)), '^0+', '')
  if s == '' then return '0' end
  return s
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

local function badOffset(key, d)
  return redis.error_reply('ERR redislock: heal offset ' .. key .. ' holds ' ..
    string.format('%q', string.sub(d, 1, 40)) .. ', not a number in 0..' .. MAX)
end

-- offsetOf is the heal offset a read of its key returned (false: none):
-- '0' when there is none, nil when it holds something else than a
-- canonical decimal in 0..MAX.
local function offsetOf(d)
  if not d or d == '0' then return '0' end
  if not canon(d, MAX) then return nil end
  return d
end

-- offset reads the heal offset at offkey (offsetOf), and the raw value.
local function offset(offkey)
  local d = redis.call('GET', offkey)
  return offsetOf(d), d
end

-- bound returns max(counter, clock floor), at most MAX: at least every
-- token granted (each was written to the counter) and at most the next
-- grant's. Or an error reply.
local function bound(ckey, offkey)
  local _, _, nowstr = clock()
  local c = redis.call('GET', ckey)
  if c and not canon(c, MAX) then return badCounter(c) end
  local d, raw = offset(offkey)
  if not d then return badOffset(offkey, raw) end
  local f = nowstr
  if d ~= '0' then
    f = add(nowstr, d)
    if lt(MAX, f) then f = MAX end
  end
  if c and lt(f, c) then return c end
  return f
end
`

// mint sets the counter to the next token, max(counter + 1, now + d) —
// now the server clock in µs, d the heal offset (0 when there is none) —
// and returns it: usually a GETEX of the offset (which restarts its idle
// expiry: the offset is unchanged) and one SET ... GET, as the clock floor
// is ahead of the counter. The acquire script does the same inline (see
// acquireScript), and runs mint only off that path.
//
// Why the offset. Across a failover that loses the last grant, the clock
// floor keeps the next token above the lost one: the new master's clock
// reads later. A counter above the clock (after a heal to a resource's
// high-water above it, or a clock stepped back) would make tokens
// counter + 1, which do not grow with time: a failover that loses grant
// c + 1 would have the new master mint c + 1 again, for another holder,
// and every fence admits an equal token. So a heal records d = healed
// value − now, and tokens come from now + d: they grow with the clock
// like unhealed ones, and the new master, whose clock reads later, mints
// above the lost grant. When a token does come from counter + 1 (a
// counter raised by a client without offsets, or several grants in one
// µs), mint raises d to token − now, so the next grant's floor is above
// it again. d never decreases; it lives (and idles out) with the
// counter: mint writes it with every counter, "0" when there is no
// offset, so that the lock's keys exist together — in a Cluster, a
// script whose keys exist in part is refused with TRYAGAIN while its slot
// migrates. KEYS[2] the counter, offkey the offset.
const mint = `
-- settle finishes a mint once the counter has been set to the floor f
-- (SET ... GET: c the counter before, false when there was none): when c
-- is not below f, the token is c + 1 instead (and the counter set to it),
-- raising d; the offset is written when it changed or did not exist (raw
-- is what GETEX read, which restarted its idle expiry). Returns as mint.
local function settle(nowstr, idle, offkey, f, d, raw, c)
  local tok, why = f, nil
  if c then
    if not canon(c, MAX) then
      tok, why = nil, 'bad'
    elseif not lt(c, f) then
      if c == MAX then
        tok, why = nil, 'range'
      else
        tok = incr(c)
        if lt(nowstr, tok) then
          local nd = sub(tok, nowstr)
          if lt(d, nd) then d = nd end
        end
      end
    end
    if tok ~= f then redis.call('SET', KEYS[2], tok or c, 'PX', idle) end
  end
  if d ~= raw then redis.call('SET', offkey, d, 'PX', idle) end
  if not tok then return nil, why, c end
  return tok
end

-- mint returns the new token, or nil and why not: 'range' when the
-- counter is at the ceiling or the clock floor past it, 'bad' when the
-- counter holds something else than a token, 'badoff' when the offset
-- does (the value third); then the counter is put back as it was (its
-- idle expiry restarted) and nothing is minted. raw is the offset as
-- read by GETEX offkey PX idle (false: none), which restarted its expiry.
local function mint(nowstr, idle, offkey, raw)
  local d = offsetOf(raw)
  if not d then
    redis.call('PEXPIRE', KEYS[2], idle)
    return nil, 'badoff', raw
  end
  local f = nowstr
  if d ~= '0' then
    f = add(nowstr, d)
    if lt(MAX, f) then
      redis.call('PEXPIRE', KEYS[2], idle)
      return nil, 'range', f
    end
  end
  return settle(nowstr, idle, offkey, f, d, raw, redis.call('SET', KEYS[2], f, 'PX', idle, 'GET'))
end

-- mintErr is the error reply of a mint that failed for a reason other
-- than the ceiling.
local function mintErr(why, v, offkey)
  if why == 'badoff' then return badOffset(offkey, v) end
  return badCounter(v)
end
`

// handOver releases the lock: it grants it to the first live waiter, whose
// wake-up carries the token, or deletes it when nobody waits. Waiters
// whose liveness deadline passed (they crashed or lost their connection
// without leaving the queue) are dropped first. When the counter cannot
// mint (at the ceiling), the lock is deleted and every waiter woken: their
// acquires then fail with the reason, and leave the queue.
//
// KEYS[1..5]; channel, idle (counter idle ms). Needs decimal and mint.
const handOver = `
local function handOver(channel, idle)
  local nowms, _, nowstr = clock()
  local dead = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', nowms, 'LIMIT', 0, 100)
  if #dead > 0 then
    redis.call('ZREM', KEYS[4], unpack(dead))
    redis.call('ZREM', KEYS[5], unpack(dead))
  end
  local nxt = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  if not nxt then
    redis.call('DEL', KEYS[1])
    return
  end
  local id, ttl = string.match(nxt, '^(.*)|(%d+)$')
  if not id then
    redis.call('ZREM', KEYS[4], nxt)
    redis.call('ZREM', KEYS[5], nxt)
    redis.call('DEL', KEYS[1])
    return
  end
  local tok = mint(nowstr, idle, KEYS[3], redis.call('GETEX', KEYS[3], 'PX', idle))
  if not tok then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', channel, '*') -- rnotify.Everyone
    return
  end
  redis.call('ZREM', KEYS[4], nxt)
  redis.call('ZREM', KEYS[5], nxt)
  local v = id .. '|' .. tok
  redis.call('SET', KEYS[1], v, 'PX', ttl)
  redis.call('PUBLISH', channel, v)
end
`

// acquireScript takes the lock when it is free, minting the token in the
// same step. Uncontended, that is GET of the lock, TIME, GETEX of the
// offset, one SET ... GET on the counter and the lock's SET, done inline
// before the helpers are even defined (a script's chunk runs in full on
// every call: each local function is a closure made anew): when the
// offset is "0" (or missing) the floor is the clock, and when the counter
// was below it the token is the clock. Anything else — the lock taken
// with enqueue "1", an offset, a counter not plainly below the clock —
// goes on to the general path, mint's, from where the fast path stopped.
//
// "Plainly below": the counter is a canonical decimal and, as numbers,
// below the clock, which is below 9·10^15 (until the year 2255). That
// compare is exact: 9·10^15 < 2^53, so tonumber holds the clock exactly;
// rounding is monotone and 9·10^15 a double, so a counter that converts
// below the clock is below 9·10^15 too, and held exactly. The token itself
// stays the clock's decimal string; anything else is decided by mint's
// digit-wise compare (lt).
//
// A waiter (enqueue "1") that finds the lock granted to it by a release
// gets the token the lock holds; otherwise it joins or refreshes its place
// in the queue.
//
// KEYS: lock, counter, offset, queue, deadlines.
// ARGV: id, ttl ms, counter idle ms, waiter TTL ms, enqueue ("1" or "0";
// without the last two, "0").
// Returns {1, token} when granted now; {2, token} when a release handed
// the lock over earlier; {0, ms until worth retrying, joined} when not
// granted, joined 1 if the waiter was not in the queue and joined it now;
// {3, value} when the counter or the clock floor is at or past the ceiling
// (nothing granted). A counter or offset that is not a number is an error
// reply.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local nowstr, raw, c, swapped
if not v then
  local t = redis.call('TIME')
  nowstr = t[2]
  if #nowstr ~= 6 then nowstr = string.rep('0', 6 - #nowstr) .. nowstr end
  nowstr = t[1] .. nowstr
  raw = redis.call('GETEX', KEYS[3], 'PX', ARGV[3])
  if not raw or raw == '0' then
    c = redis.call('SET', KEYS[2], nowstr, 'PX', ARGV[3], 'GET')
    swapped = true
    local nowus = c and tonumber(nowstr)
    if not c or (nowus < 9e15 and string.find(c, '^[1-9]%d*$') and tonumber(c) < nowus) then
      if not raw then redis.call('SET', KEYS[3], '0', 'PX', ARGV[3]) end
      redis.call('SET', KEYS[1], ARGV[1] .. '|' .. nowstr, 'PX', ARGV[2])
      if ARGV[5] == '1' then
        local m = ARGV[1] .. '|' .. ARGV[2]
        redis.call('ZREM', KEYS[4], m)
        redis.call('ZREM', KEYS[5], m)
      end
      return {1, nowstr}
    end
  end
elseif ARGV[5] ~= '1' then
  return {0, 0, 0}
end
` + decimal + mint + `
if not v then
  local tok, why, cv
  if swapped then
    tok, why, cv = settle(nowstr, ARGV[3], KEYS[3], nowstr, '0', raw, c)
  else
    tok, why, cv = mint(nowstr, ARGV[3], KEYS[3], raw)
  end
  if not tok then
    if why == 'range' then return {3, cv} end
    return mintErr(why, cv, KEYS[3])
  end
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok, 'PX', ARGV[2])
  if ARGV[5] == '1' then
    local m = ARGV[1] .. '|' .. ARGV[2]
    redis.call('ZREM', KEYS[4], m)
    redis.call('ZREM', KEYS[5], m)
  end
  return {1, tok}
end
local mine = ARGV[1] .. '|'
if string.sub(v, 1, #mine) == mine then
  return {2, string.sub(v, #mine + 1)}
end
local nowms, nowus = clock()
local m = ARGV[1] .. '|' .. ARGV[2]
local joined = 0
if not redis.call('ZSCORE', KEYS[4], m) then
  redis.call('ZADD', KEYS[4], nowus, m)
  joined = 1
end
local wttl = tonumber(ARGV[4])
redis.call('ZADD', KEYS[5], nowms + wttl, m)
redis.call('PEXPIRE', KEYS[4], 2 * wttl)
redis.call('PEXPIRE', KEYS[5], 2 * wttl)
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
// handing it over to the next waiter. With nobody queued it is GET, EXISTS
// and DEL, before the helpers of the hand-over are defined.
//
// KEYS: lock, counter, offset, queue, deadlines. ARGV: "id|token",
// channel, counter idle ms. Returns 1 when released, 0 when not held.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[4]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
` + decimal + mint + handOver + `
handOver(ARGV[2], ARGV[3])
return 1
`)

// abandonScript undoes whatever an acquire that gave up may have left: its
// place in the queue, or a grant (by acquire or hand-over, with whatever
// token) whose news never reached it — handing the lock on.
//
// KEYS: lock, counter, offset, queue, deadlines. ARGV: id, channel,
// counter idle ms, member ("id|ttl").
var abandonScript = redis.NewScript(decimal + mint + handOver + `
redis.call('ZREM', KEYS[4], ARGV[4])
redis.call('ZREM', KEYS[5], ARGV[4])
local v = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. '|'
if v and string.sub(v, 1, #mine) == mine then handOver(ARGV[2], ARGV[3]) end
return 1
`)

// healScript raises the counter to at least ARGV[1] (a canonical decimal
// below MAX, or "0"), refreshing its idle expiry, and raises the offset
// so that the clock floor is at least the counter: d = max(d, counter −
// now) when the counter is above the clock (see mint).
//
// KEYS: lock (unused), counter, offset. ARGV: target, counter idle ms.
// Returns the counter ("0" when there is none and the target is 0).
var healScript = redis.NewScript(decimal + `
local _, _, nowstr = clock()
local c = redis.call('GET', KEYS[2])
if c and not canon(c, MAX) then return badCounter(c) end
local d, raw = offset(KEYS[3])
if not d then return badOffset(KEYS[3], raw) end
if not c or lt(c, ARGV[1]) then c = ARGV[1] end
if c == '0' then return '0' end
redis.call('SET', KEYS[2], c, 'PX', ARGV[2])
if lt(nowstr, c) then
  local nd = sub(c, nowstr)
  if lt(d, nd) then d = nd end
end
redis.call('SET', KEYS[3], d, 'PX', ARGV[2])
return c
`)

// issuedScript returns an upper bound of every token granted for the key:
// the counter, or the clock floor (now + heal offset, at most MaxToken)
// when that is larger (a counter that expired or was lost was at most the
// floor when it was last written).
//
// KEYS: lock (unused), counter, offset. Returns the bound as a decimal
// string.
var issuedScript = redis.NewScript(decimal + `
return bound(KEYS[2], KEYS[3])
`)

// currentScript is the Sequencer's answer: the token in the lock's value
// while it is held; else the counter, or the clock floor (now + heal
// offset, at most MaxToken) when that is larger — at least every token
// granted so far and at most the next grant's (which is max(counter + 1,
// floor)).
//
// KEYS: lock, counter, offset. Returns a decimal string.
var currentScript = redis.NewScript(masterOnly + decimal + `
local v = redis.call('GET', KEYS[1])
if v then
  local tok = string.match(v, '|(%d+)$')
  if tok and canon(tok, MAX) then return tok end
end
return bound(KEYS[2], KEYS[3])
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
