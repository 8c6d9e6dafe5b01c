-- mint sets the counter to the next token, max(counter + 1, now + d), d
-- the heal offset ('0' when none), and raises d when the token came from
-- counter + 1 above the clock, so that the next floor is above it again.
-- (Why the offset: docs/design.md, "redislock".) Needs
-- decimal.lua.
--
-- It returns the new token, or nil and why not: 'range' when the
-- counter is at the ceiling or the clock floor past it, 'bad' when the
-- counter's key holds something else than "c" or "c:d" (the value
-- third); then the key is put back as it was (its idle expiry
-- restarted) and nothing is minted. raw is the key's value (false:
-- none); swapped, the key already holds nowstr (the acquire's SET ...
-- GET returned raw), else it is untouched.
local function mint(nowstr, idle, raw, swapped)
  local c, d = split(raw)
  local function restore()
    if swapped then
      if raw then redis.call('SET', KEYS[2], raw, 'PX', idle) else redis.call('DEL', KEYS[2]) end
    elseif raw then
      redis.call('PEXPIRE', KEYS[2], idle)
    end
  end
  if c == false then
    restore()
    return nil, 'bad', raw
  end
  local f = nowstr
  if d ~= '0' then
    f = add(nowstr, d)
    if lt(MAX, f) then
      restore()
      return nil, 'range', f
    end
  end
  local tok = f
  if c and not lt(c, f) then
    if c == MAX then
      restore()
      return nil, 'range', c
    end
    tok = incr(c)
    if lt(nowstr, tok) then
      local nd = sub(tok, nowstr)
      if lt(d, nd) then d = nd end
    end
  end
  if not swapped or tok ~= nowstr or d ~= '0' then
    redis.call('SET', KEYS[2], joined(tok, d), 'PX', idle)
  end
  return tok
end
