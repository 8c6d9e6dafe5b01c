-- renew extends the lock only while it holds this grant.
-- KEYS: lock. ARGV: "id|token", px (the TTL plus the lock-delay, ms).
-- Returns 1 when extended, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
