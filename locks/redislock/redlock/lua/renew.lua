-- renew extends the node's lock while it holds this grant, and restarts
-- the counter's idle expiry with it: a lease held past CounterIdle keeps
-- its counter and offset.
-- KEYS: lock, counter. ARGV: id, px (the TTL plus the lock-delay, ms),
-- counter idle ms.
-- Returns 1 when extended, else 0.
-- Needs ours.lua.
if ours(redis.call('GET', KEYS[1]), ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
