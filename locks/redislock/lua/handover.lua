-- handOver releases the lock: it grants it to the first live waiter,
-- whose wake-up carries the token, or deletes it when nobody waits.
-- Waiters whose liveness deadline passed are dropped first. When the
-- counter cannot mint (at the ceiling, or malformed), the lock is deleted
-- and every waiter woken: their acquires then fail with the reason.
-- KEYS[1..4]; channel, idle (counter idle ms). Needs decimal.lua,
-- counter.lua and mint.lua.
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
  local id, px = string.match(nxt, '^(.*)|(%d+)$')
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
  redis.call('SET', KEYS[1], v, 'PX', px) -- the waiter's TTL plus the lock-delay
  redis.call('PUBLISH', channel, v)
end
