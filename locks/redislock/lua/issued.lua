-- issued returns an upper bound of every token granted for the key: the
-- counter or the clock floor (now + offset, at most MAX), or the held
-- grant's token when larger (a healed key's counter may idle out under a
-- lease). KEYS: lock, counter. Needs decimal.lua, counter.lua and
-- heldtoken.lua.
local b = bound(KEYS[2])
if type(b) ~= 'string' then return b end
local tok = heldToken(KEYS[1])
if tok and lt(b, tok) then return tok end
return b
