-- release, first part: only while the lock holds this grant; with nobody
-- queued it is GET, EXISTS and DEL, before the hand-over's helpers.
-- KEYS: lock, counter, queue, deadlines. ARGV: "id|token", channel,
-- counter idle ms. Returns 1 when released, 0 when not held.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
