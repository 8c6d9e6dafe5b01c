-- heldToken(k) is the token in the lock's value at k ("id|token") while
-- it is held, else nil. Needs decimal.lua.
local function heldToken(k)
  local v = redis.call('GET', k)
  local tok = v and string.match(v, '|(%d+)$')
  if tok and canon(tok, MAX) then return tok end
  return nil
end
