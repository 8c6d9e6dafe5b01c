-- tryall: one try at several locks, all or none (after decimal.lua,
-- counter.lua and mint.lua). Each lock is granted on exactly the
-- condition of a single try (acquire_fast.lua without enqueue): its lock
-- key is free, whatever its queue holds; and its token is minted as a
-- single grant's (nextToken). Every lock and counter is checked before
-- anything is written, so a refusal writes nothing.
--
-- KEYS: for each lock, in turn, its lock, counter, queue and deadlines
-- (the last two unused: named so that a call on a migrating slot waits
-- for the move like a single try).
-- ARGV: id, px (the TTL plus the lock-delay, ms), counter idle ms.
-- Returns {1, token, ...}, one token per lock, when all are granted;
-- {0, i} when lock i is held; {3, i, value} when lock i's counter or
-- clock floor is at the ceiling. A malformed counter is an error reply
-- naming it.
local n = #KEYS / 4
for i = 1, n do
  if redis.call('EXISTS', KEYS[4 * i - 3]) == 1 then return {0, i} end
end
local _, _, nowstr = clock()
local toks, offs = {}, {}
for i = 1, n do
  local ckey = KEYS[4 * i - 2]
  local tok, d, cv = nextToken(nowstr, redis.call('GET', ckey))
  if not tok then
    if d == 'range' then return {3, i, cv} end
    return badCounter(cv, ckey)
  end
  toks[i], offs[i] = tok, d
end
local res = {1}
for i = 1, n do
  redis.call('SET', KEYS[4 * i - 2], joined(toks[i], offs[i]), 'PX', ARGV[3])
  redis.call('SET', KEYS[4 * i - 3], ARGV[1] .. '|' .. toks[i], 'PX', ARGV[2])
  res[i + 1] = toks[i]
end
return res
