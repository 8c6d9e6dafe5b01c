-- acquire, first part: the uncontended path, run before any helper is
-- defined (a script's chunk runs in full on every call, and each local
-- function is a closure made anew). When the lock is free and the counter
-- is plainly below the clock with no offset, the token is the clock: GET,
-- TIME, one SET ... GET of the counter and the lock's SET. "Plainly
-- below": canonical and, as numbers, below the clock, itself below
-- 9e15 < 2^53, where doubles are exact. Anything else goes on to
-- acquire.lua, from where this stopped.
--
-- KEYS: lock, counter, queue, deadlines.
-- ARGV: id, px (the TTL plus the lock-delay, ms), counter idle ms, waiter
-- TTL ms, enqueue ("1" or "0"; without the last two, "0").
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
