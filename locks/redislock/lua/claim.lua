-- claim is the Fence's check-and-advance on decimal strings (every
-- uint64). An accepted claim always writes the mark, equal tokens
-- included, so that a replica answers READONLY instead of accepting from
-- a stale copy. KEYS: high-water. ARGV: token. Returns {1} when accepted,
-- {0, current} when stale; an error reply when the mark is not a token.
-- Needs decimal.lua.
local MAXU64 = '18446744073709551615'
local cur = redis.call('GET', KEYS[1])
if cur then
  if not canon(cur, MAXU64) then
    return redis.error_reply('ERR redislock: fence mark ' .. KEYS[1] .. ' holds ' ..
      string.format('%q', string.sub(cur, 1, 40)) .. ', not a token')
  end
  if lt(ARGV[1], cur) then return {0, cur} end
end
redis.call('SET', KEYS[1], ARGV[1])
return {1}
