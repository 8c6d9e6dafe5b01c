-- heal raises the counter to at least the target and the offset to at
-- least the target's lead over the clock, so that from now on the node's
-- clock floor alone is at least the target. A malformed counter (not one
-- this package wrote: whatever it stood for is lost, as on a restart) is
-- replaced by max(target, now in µs) with the target's lead.
-- KEYS: counter. ARGV: target, counter idle ms, target + 1.
-- Returns the counter.
if not canon(ARGV[1], MAX) then return redis.error_reply('redlock: bad heal target ' .. ARGV[1]) end
if not canon(ARGV[3], MAX) then return redis.error_reply('redlock: bad heal target ' .. ARGV[3]) end
local _, _, nowstr = clock()
local nd = lead(ARGV[3], nowstr)
local ok, c, d = pcall(counter, KEYS[1])
if not ok then
  c, d = nowstr, nd
  if lt(c, ARGV[1]) then c = ARGV[1] end
else
  if not c or lt(c, ARGV[1]) then c = ARGV[1] end
  if lt(d, nd) then d = nd end
end
store(KEYS[1], c, d, ARGV[2])
return c
