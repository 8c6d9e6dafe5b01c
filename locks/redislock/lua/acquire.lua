-- acquire, second part (after acquire_fast.lua, decimal.lua, counter.lua
-- and mint.lua). Returns {1, token} when granted now; {2, token} when a
-- release handed the lock over earlier; {0, ms until worth retrying,
-- joined} when not granted (joined 1: the waiter joined the queue now);
-- {3, value} when the counter or the clock floor is at the ceiling. A
-- malformed counter is an error reply.
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
