package redlock

import "github.com/redis/go-redis/v9"

// Per node, the keys of one lock share the hash tag {key}:
//
//	<prefix>{<key>}      the lock: "<grant id>" once taken, "<grant id>|<token>"
//	                     once the grant's token is written back; PX ttl
//	<prefix>{<key>}:tok  the node's token counter c and clock offset d, as
//	                     "c:d" ("c" when d is 0), PX counter idle time: the
//	                     node's floor is max(c, now + d) (see "The clock
//	                     offset" in the package doc). One key, so that they
//	                     are kept or lost together (an eviction, an expiry)
//
// and a release publishes on <prefix>{<key>}:wake.
//
// Tokens and counters are canonical decimal strings (digits, no leading
// zero) of at most token.MaxInt64 ("0" too: an old Heal(0) wrote it), and
// never pass through a Lua number: Lua numbers are doubles, exact only
// below 2^53. The scripts compare them
// as strings (gt), read the clock as a string (nowstr), and refuse a
// stored counter that is not such a string with an error reply starting
// with counterErrPrefix. Minting (max + 1) and the clock floor (now + d)
// happen in Go, in uint64.

// counterErrPrefix starts the error reply of a script that found a
// malformed counter; the node's client turns it into a [*CounterError].
const counterErrPrefix = "FENCEGUARD_COUNTER "

// decimal defines, for the scripts:
//
//	gt(a, b)   a > b, for canonical decimal strings: the longer is larger;
//	           of equal length, the high digits (at most 10: exact as a
//	           double) decide, then the low 9.
//	valid(s)   s is a canonical decimal string, 0 to token.MaxInt64.
//	counter(k) the counter and the clock offset stored at k: c (nil when
//	           there is none) and d ('0' when there is none); a malformed
//	           value raises the error reply (nothing has been written yet
//	           in any script that calls it first).
//	store(k, c, d, idle) writes them back, "c" or "c:d", PX idle.
//	lead(v, now) the offset that puts the clock's next µs at v: v − 1 −
//	           now, or '0' when v is not ahead of now + 1; digit by digit.
const decimal = `
local function gt(a, b)
  if #a ~= #b then return #a > #b end
  local ah, bh = tonumber(string.sub(a, 1, -10)) or 0, tonumber(string.sub(b, 1, -10)) or 0
  if ah ~= bh then return ah > bh end
  return tonumber(string.sub(a, -9)) > tonumber(string.sub(b, -9))
end
local function valid(s)
  if type(s) ~= 'string' or #s == 0 or #s > 19 then return false end
  if s ~= '0' and not string.find(s, '^[1-9][0-9]*$') then return false end
  return not gt(s, '9223372036854775807')
end
local function counter(k)
  local v = redis.call('GET', k)
  if not v then return nil, '0' end
  local c, d = v, '0'
  local i = string.find(v, ':', 1, true)
  if i then c, d = string.sub(v, 1, i - 1), string.sub(v, i + 1) end
  if not valid(c) or not valid(d) then
    return error({err = '` + counterErrPrefix + `' .. string.sub(v, 1, 40)})
  end
  return c, d
end
local function store(k, c, d, idle)
  if d == '0' then
    redis.call('SET', k, c, 'PX', idle)
  else
    redis.call('SET', k, c .. ':' .. d, 'PX', idle)
  end
end
local function lead(v, now)
  if not gt(v, now) then return '0' end
  -- v − now − 1, borrowing digit by digit (v > now, both canonical).
  local r, borrow = {}, 1
  local i, j = #v, #now
  while i > 0 do
    local x = string.byte(v, i) - 48 - borrow
    if j > 0 then x = x - (string.byte(now, j) - 48) end
    if x < 0 then x, borrow = x + 10, 1 else borrow = 0 end
    r[#r + 1] = string.char(48 + x)
    i, j = i - 1, j - 1
  end
  local s = string.gsub(string.reverse(table.concat(r)), '^0+', '')
  if s == '' then return '0' end
  return s
end
`

// ours(v, id) reports whether the lock value v belongs to grant id, with
// or without its token.
const ours = `
local function ours(v, id)
  return v == id or (type(v) == 'string' and string.sub(v, 1, #id + 1) == id .. '|')
end
`

// timeNow reads the server clock in µs as a canonical decimal string:
// seconds, then the microseconds padded to six digits.
const timeNow = `
local t = redis.call('TIME')
local nowstr = t[1] .. string.format('%06d', tonumber(t[2]))
`

// acquireScript takes the node's lock if free and returns what the token
// is minted from: the node's counter, its clock in µs and its clock
// offset, without changing them (the caller floors the counter by the
// clock plus the offset, in uint64). A malformed counter or offset fails
// the call before the lock is taken.
//
// KEYS: lock, counter. ARGV: id, ttl ms.
// Returns {1, counter or "", now, offset} when taken, {0, pttl, holder}
// when held by another (holder: the lock's value, "id" or "id|token").
var acquireScript = redis.NewScript(decimal + `
local c, d = counter(KEYS[2])
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]) or ''}
end
` + timeNow + `
return {1, c or '', nowstr, d}
`)

// writeBackScript records the grant's token on the node, only while this
// grant holds the node's lock: the lock's value becomes "id|token" (its
// TTL kept), the counter is raised to the token if it is below, and the
// clock offset to lead(token, now) if it is below, so that from the next
// µs on the node's clock floor alone is at least the token. The clock is
// read here, after every node answered the acquire: a lead taken from an
// earlier reading would add the spread of the acquire's answers to the
// offset at every grant, and tokens would run ahead of the clocks.
//
// KEYS: lock, counter. ARGV: id, token, counter idle ms.
// Returns 1 when written, 0 when the node's lock is not ours.
var writeBackScript = redis.NewScript(decimal + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if not valid(ARGV[2]) or ARGV[2] == '0' then return redis.error_reply('redlock: bad token ' .. ARGV[2]) end
local c, d = counter(KEYS[2])
` + timeNow + `
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'KEEPTTL')
if not c or gt(ARGV[2], c) then c = ARGV[2] end
local nd = lead(ARGV[2], nowstr)
if gt(nd, d) then d = nd end
store(KEYS[2], c, d, ARGV[3])
return 1
`)

// renewScript extends the node's lock only if it still holds this grant,
// and restarts the counter's idle expiry with it: a lease held past
// CounterIdle keeps its counter (and offset), so the grant after it is
// minted above it, not from the bare clock.
//
// KEYS: lock, counter. ARGV: id, ttl ms, counter idle ms. Returns 1 when
// extended, else 0.
var renewScript = redis.NewScript(ours + `
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
`)

// releaseScript deletes the node's lock only if it holds this grant, and
// wakes every waiter on the node.
//
// KEYS: lock. ARGV: id, channel. Returns 1 when released, else 0.
var releaseScript = redis.NewScript(ours + `
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '*')
return 1
`)

// issuedScript returns what the bound of the node's tokens is computed
// from: {counter or "", now in µs, offset, the token in the lock's value
// or ""} — the lock's token because a lease that is not renewed may
// outlive its counter (CounterIdle).
//
// KEYS: counter, lock.
var issuedScript = redis.NewScript(decimal + `
local c, d = counter(KEYS[1])
` + timeNow + `
local v = redis.call('GET', KEYS[2])
local tok = v and string.match(v, '|(%d+)$')
if not tok or not valid(tok) then tok = '' end
return {c or '', nowstr, d, tok}
`)

// currentScript returns what the node knows of the lock's current grant:
// the lock's value and the counter, each empty when there is none.
//
// KEYS: lock, counter.
var currentScript = redis.NewScript(decimal + `
local c = counter(KEYS[2])
return {redis.call('GET', KEYS[1]) or '', c or ''}
`)

// healScript raises the counter to at least ARGV[1] (validated by the
// caller: below token.MaxInt64) and the clock offset to at least the
// target's lead over the clock, lead(target + 1, now) = target − now, so
// that from now on the node's clock floor alone is at least the target. A
// malformed counter is not a token this package wrote — whatever it stood
// for is lost, as on a restart — and is replaced by max(target, now in
// µs), the value a restarted node would floor its counter to after the
// heal, and its offset by the target's lead.
//
// KEYS: counter. ARGV: target, counter idle ms, target + 1.
// Returns the counter.
var healScript = redis.NewScript(decimal + timeNow + `
if not valid(ARGV[1]) then return redis.error_reply('redlock: bad heal target ' .. ARGV[1]) end
if not valid(ARGV[3]) then return redis.error_reply('redlock: bad heal target ' .. ARGV[3]) end
local nd = lead(ARGV[3], nowstr)
local ok, c, d = pcall(counter, KEYS[1])
if not ok then
  c, d = nowstr, nd
  if gt(ARGV[1], c) then c = ARGV[1] end
else
  if not c or gt(ARGV[1], c) then c = ARGV[1] end
  if gt(nd, d) then d = nd end
end
store(KEYS[1], c, d, ARGV[2])
return c
`)
