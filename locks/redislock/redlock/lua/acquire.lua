-- acquire takes the node's lock if free and returns what the token is
-- minted from, unchanged: the counter, the clock in µs and the offset (the
-- caller floors the counter by clock + offset, in uint64). A malformed
-- counter fails the call before the lock is taken.
-- KEYS: lock, counter. ARGV: id, px (the TTL plus the lock-delay, ms).
-- Returns {1, counter or "", now, offset} when taken, {0, pttl, holder}
-- when held by another (holder: the lock's value, "id" or "id|token").
local c, d = counter(KEYS[2])
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1]) or ''}
end
local _, _, nowstr = clock()
return {1, c or '', nowstr, d}
