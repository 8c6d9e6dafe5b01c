-- writeback records the grant's token on the node while this grant holds
-- the node's lock: the lock's value becomes "id|token" (its TTL kept), the
-- counter rises to the token, and the offset to lead(token, now), so that
-- from the next µs on the node's clock floor alone is at least the token.
-- The clock is read here, after every node answered the acquire (an
-- earlier reading would add the spread of the answers to the offset at
-- every grant).
-- KEYS: lock, counter. ARGV: id, token, counter idle ms.
-- Returns 1 when written, 0 when the node's lock is not this grant's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if not canon(ARGV[2], MAX) then return redis.error_reply('redlock: bad token ' .. ARGV[2]) end
local c, d = counter(KEYS[2])
local _, _, nowstr = clock()
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'KEEPTTL')
if not c or lt(c, ARGV[2]) then c = ARGV[2] end
local nd = lead(ARGV[2], nowstr)
if lt(d, nd) then d = nd end
store(KEYS[2], c, d, ARGV[3])
return 1
