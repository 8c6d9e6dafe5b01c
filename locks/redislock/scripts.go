package redislock

import "github.com/redis/go-redis/v9"

// Keys of one lock, all sharing the hash tag {key} so they live in one
// cluster slot and a script may touch them together:
//
//	<prefix>{<key>}        the lock: "<grant id>|<token>", PX ttl
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
    string.format('%q', string.sub(c, 1, 40)) .. ', not a token in 1..' .. MAX ..
    ' (or "token:offset", the offset in 1..' .. MAX .. ')')
end

-- split reads the counter's stored value raw (false: none): the counter c
-- (nil when there is none) and the heal offset d ('0' when there is
-- none), or false when raw holds something else than "c" or "c:d" with c
-- and d canonical decimals in 1..MAX.
local function split(raw)
  if not raw then return nil, '0' end
  local i = string.find(raw, ':', 1, true)
  if not i then
    if canon(raw, MAX) then return raw, '0' end
    return false
  end
  local c, d = string.sub(raw, 1, i - 1), string.sub(raw, i + 1)
  if canon(c, MAX) and canon(d, MAX) then return c, d end
  return false
end

-- joined is the stored value of counter c with offset d.
local function joined(c, d)
  if d == '0' then return c end
  return c .. ':' .. d
end

-- bound returns max(counter, clock floor), at most MAX: at least every
-- token granted while the counter lived (each was written to it) and at
-- most the next grant's. Or an error reply.
local function bound(ckey)
  local _, _, nowstr = clock()
  local raw = redis.call('GET', ckey)
  local c, d = split(raw)
  if c == false then return badCounter(raw) end
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
// and returns it: usually one SET ... GET of the counter's key, as the
// clock floor is ahead of the counter. The acquire script does the same
// inline (see acquireScript), and runs mint only off that path.
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
// it again. d never decreases. It is stored in the counter's own key,
// "c:d": kept, replicated, expired and evicted with the counter, never
// apart from it (an offset lost alone — a separate key evicted under
// maxmemory — would bring the repeat back: the counter + 1 of a healed
// key does not grow with time).
const mint = `
-- mint returns the new token, or nil and why not: 'range' when the
-- counter is at the ceiling or the clock floor past it, 'bad' when the
-- counter's key holds something else than "c" or "c:d" (the value
-- third); then the key is put back as it was (its idle expiry
-- restarted) and nothing is minted. raw is the key's value (false:
-- none); swapped, the key already holds nowstr (the acquire's SET ...
-- GET returned raw), else it is untouched.
local function mint(nowstr, idle, raw, swapped)
  local c, d = split(raw)
  local function restore()
    if swapped then
      if raw then redis.call('SET', KEYS[2], raw, 'PX', idle) else redis.call('DEL', KEYS[2]) end
    elseif raw then
      redis.call('PEXPIRE', KEYS[2], idle)
    end
  end
  if c == false then
    restore()
    return nil, 'bad', raw
  end
  local f = nowstr
  if d ~= '0' then
    f = add(nowstr, d)
    if lt(MAX, f) then
      restore()
      return nil, 'range', f
    end
  end
  local tok = f
  if c and not lt(c, f) then
    if c == MAX then
      restore()
      return nil, 'range', c
    end
    tok = incr(c)
    if lt(nowstr, tok) then
      local nd = sub(tok, nowstr)
      if lt(d, nd) then d = nd end
    end
  end
  if not swapped or tok ~= nowstr or d ~= '0' then
    redis.call('SET', KEYS[2], joined(tok, d), 'PX', idle)
  end
  return tok
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
  local tok = mint(nowstr, idle, redis.call('GET', KEYS[2]), false)
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
// same step. Uncontended, that is GET of the lock, TIME, one SET ... GET
// on the counter's key and the lock's SET, done inline before the helpers
// are even defined (a script's chunk runs in full on every call: each
// local function is a closure made anew): when the counter was plainly
// below the clock and has no offset, the token is the clock. Anything
// else — the lock taken with enqueue "1", an offset, a counter not plainly
// below the clock — goes on to the general path, mint's, from where the
// fast path stopped.
//
// "Plainly below": the counter is a canonical decimal with no offset
// and, as numbers, below the clock, which is below 9·10^15 (until the year
// 2255). That compare is exact: 9·10^15 < 2^53, so tonumber holds the
// clock exactly; rounding is monotone and 9·10^15 a double, so a counter
// that converts below the clock is below 9·10^15 too, and held exactly.
// The token itself stays the clock's decimal string; anything else is
// decided by mint's digit-wise compare (lt).
//
// A waiter (enqueue "1") that finds the lock granted to it by a release
// gets the token the lock holds; otherwise it joins or refreshes its place
// in the queue.
//
// KEYS: lock, counter, queue, deadlines.
// ARGV: id, ttl ms, counter idle ms, waiter TTL ms, enqueue ("1" or "0";
// without the last two, "0").
// Returns {1, token} when granted now; {2, token} when a release handed
// the lock over earlier; {0, ms until worth retrying, joined} when not
// granted, joined 1 if the waiter was not in the queue and joined it now;
// {3, value} when the counter or the clock floor is at or past the ceiling
// (nothing granted). A counter's key that holds something else than "c"
// or "c:d" is an error reply.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local nowstr, c
if not v then
  local t = redis.call('TIME')
  nowstr = t[2]
  if #nowstr ~= 6 then nowstr = string.rep('0', 6 - #nowstr) .. nowstr end
  nowstr = t[1] .. nowstr
  c = redis.call('SET', KEYS[2], nowstr, 'PX', ARGV[3], 'GET')
  local nowus = c and tonumber(nowstr)
  if not c or (nowus < 9e15 and string.find(c, '^[1-9]%d*$') and tonumber(c) < nowus) then
    redis.call('SET', KEYS[1], ARGV[1] .. '|' .. nowstr, 'PX', ARGV[2])
    if ARGV[5] == '1' then
      local m = ARGV[1] .. '|' .. ARGV[2]
      redis.call('ZREM', KEYS[3], m)
      redis.call('ZREM', KEYS[4], m)
    end
    return {1, nowstr}
  end
elseif ARGV[5] ~= '1' then
  return {0, 0, 0}
end
` + decimal + mint + `
if not v then
  local tok, why, cv = mint(nowstr, ARGV[3], c, true)
  if not tok then
    if why == 'range' then return {3, cv} end
    return badCounter(cv)
  end
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. tok, 'PX', ARGV[2])
  if ARGV[5] == '1' then
    local m = ARGV[1] .. '|' .. ARGV[2]
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
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
// handing it over to the next waiter. With nobody queued it is GET, EXISTS
// and DEL, before the helpers of the hand-over are defined.
//
// KEYS: lock, counter, queue, deadlines. ARGV: "id|token", channel,
// counter idle ms. Returns 1 when released, 0 when not held.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
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
// below MAX, or "0"), refreshing its idle expiry, and raises the offset
// so that the clock floor is at least the counter: d = max(d, counter −
// now) when the counter is above the clock (see mint).
//
// KEYS: lock (unused), counter. ARGV: target, counter idle ms.
// Returns the counter ("0" when there is none and the target is 0).
var healScript = redis.NewScript(decimal + `
local _, _, nowstr = clock()
local raw = redis.call('GET', KEYS[2])
local c, d = split(raw)
if c == false then return badCounter(raw) end
if not c or lt(c, ARGV[1]) then c = ARGV[1] end
if c == '0' then return '0' end
if lt(nowstr, c) then
  local nd = sub(c, nowstr)
  if lt(d, nd) then d = nd end
end
redis.call('SET', KEYS[2], joined(c, d), 'PX', ARGV[2])
return c
`)

// heldToken(k) is the token in the lock's value at k ("id|token") while
// it is held, else nil. Needs decimal.
const heldToken = `
local function heldToken(k)
  local v = redis.call('GET', k)
  local tok = v and string.match(v, '|(%d+)$')
  if tok and canon(tok, MAX) then return tok end
  return nil
end
`

// issuedScript returns an upper bound of every token granted for the key:
// the counter, or the clock floor (now + heal offset, at most MaxToken)
// when that is larger (a counter that expired or was lost was at most the
// floor when it was last written), or the token in the lock's value when
// that is larger still (a healed key's counter may idle out while its
// lock is held).
//
// KEYS: lock, counter. Returns the bound as a decimal string.
var issuedScript = redis.NewScript(decimal + heldToken + `
local b = bound(KEYS[2])
if type(b) ~= 'string' then return b end
local tok = heldToken(KEYS[1])
if tok and lt(b, tok) then return tok end
return b
`)

// currentScript is the Sequencer's answer: the token in the lock's value
// while it is held; else the counter, or the clock floor (now + heal
// offset, at most MaxToken) when that is larger — at least every token
// granted so far and at most the next grant's (which is max(counter + 1,
// floor)).
//
// KEYS: lock, counter. Returns a decimal string.
var currentScript = redis.NewScript(masterOnly + decimal + heldToken + `
return heldToken(KEYS[1]) or bound(KEYS[2])
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
