-- abandon undoes what an acquire that gave up may have left: its place in
-- the queue, or a grant whose news never reached it (handing the lock on).
-- KEYS: lock, counter, queue, deadlines. ARGV: id, channel, counter idle
-- ms, member ("id|px"). Needs decimal.lua, counter.lua, mint.lua and
-- handover.lua.
redis.call('ZREM', KEYS[3], ARGV[4])
redis.call('ZREM', KEYS[4], ARGV[4])
local v = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. '|'
if v and string.sub(v, 1, #mine) == mine then handOver(ARGV[2], ARGV[3]) end
return 1
