-- current returns what the node holds of the lock's current grant: the
-- lock's value and the counter, each "" when there is none.
-- KEYS: lock, counter.
local c = counter(KEYS[2])
return {redis.call('GET', KEYS[1]) or '', c or ''}
