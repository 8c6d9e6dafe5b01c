-- nextToken computes the next token from the counter key's value raw
-- (false: none) and the clock nowstr, writing nothing: max(counter + 1,
-- now + d), d the heal offset ('0' when none), and the offset to store
-- with it, d raised when the token came from counter + 1 above the clock,
-- so that the next floor is above it again. (Why the offset:
-- docs/design.md, "redislock".) Or nil and why not, as mint. Needs
-- decimal.lua.
--
-- mint sets the counter (KEYS[2]) to nextToken's token and offset. It
-- returns the new token, or nil and why not: 'range' when the
-- counter is at the ceiling or the clock floor past it, 'bad' when the
-- counter's key holds something else than "c" or "c:d" (the value
-- third); then the key is put back as it was (its idle expiry
-- restarted) and nothing is minted. raw is the key's value (false:
-- none); swapped, the key already holds nowstr (the acquire's SET ...
-- GET returned raw), else it is untouched.
local function nextToken(nowstr, raw)
  local c, d = split(raw)
  if c == false then return nil, 'bad', raw end
  local f = nowstr
  if d ~= '0' then
    f = add(nowstr, d)
    if lt(MAX, f) then return nil, 'range', f end
  end
  local tok = f
  if c and not lt(c, f) then
    if c == MAX then return nil, 'range', c end
    tok = incr(c)
    if lt(nowstr, tok) then
      local nd = sub(tok, nowstr)
      if lt(d, nd) then d = nd end
    end
  end
  return tok, d
end

local function mint(nowstr, idle, raw, swapped)
  local tok, d, cv = nextToken(nowstr, raw)
  if not tok then
    if swapped then
      if raw then redis.call('SET', KEYS[2], raw, 'PX', idle) else redis.call('DEL', KEYS[2]) end
    elseif raw then
      redis.call('PEXPIRE', KEYS[2], idle)
    end
    return nil, d, cv
  end
  if not swapped or tok ~= nowstr or d ~= '0' then
    redis.call('SET', KEYS[2], joined(tok, d), 'PX', idle)
  end
  return tok
end
