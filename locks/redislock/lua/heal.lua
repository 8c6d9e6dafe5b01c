-- heal raises the counter to at least ARGV[1] (canonical, below MAX, or
-- "0") and the offset so that the clock floor is at least the counter.
-- KEYS: lock (unused), counter. ARGV: target, counter idle ms. Returns the
-- counter ("0" when there is none and the target is 0). Needs decimal.lua
-- and counter.lua.
local _, _, nowstr = clock()
local raw = redis.call('GET', KEYS[2])
local c, d = split(raw)
if c == false then return badCounter(raw) end
if not c or lt(c, ARGV[1]) then c = ARGV[1] end
if c == '0' then return '0' end
if lt(nowstr, c) then
  local nd = sub(c, nowstr)
  if lt(d, nd) then d = nd end
end
redis.call('SET', KEYS[2], joined(c, d), 'PX', ARGV[2])
return c
