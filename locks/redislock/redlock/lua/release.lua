-- release deletes the node's lock while it holds this grant, and wakes
-- every waiter on the node.
-- KEYS: lock. ARGV: id, channel. Returns 1 when released, else 0.
-- Needs ours.lua.
if not ours(redis.call('GET', KEYS[1]), ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '*')
return 1
