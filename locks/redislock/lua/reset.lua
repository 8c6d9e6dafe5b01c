-- reset sets the Fence's mark by hand. KEYS: high-water. ARGV: token.
-- Returns the previous mark, "" when none.
local prev = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
return prev or ''
