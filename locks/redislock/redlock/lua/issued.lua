-- issued returns what the bound of the node's tokens is computed from:
-- {counter or "", now in µs, offset, the held grant's token or ""} (a
-- lease that is not renewed may outlive its counter).
-- KEYS: counter, lock.
local c, d = counter(KEYS[1])
local _, _, nowstr = clock()
local v = redis.call('GET', KEYS[2])
local tok = v and string.match(v, '|(%d+)$')
if not canon(tok, MAX) then tok = '' end
return {c or '', nowstr, d, tok}
