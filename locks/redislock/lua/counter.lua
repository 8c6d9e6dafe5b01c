-- Counter helpers of redislock's scripts; need decimal.lua.

-- badCounter is the error reply of a malformed counter: the counter key
-- ckey's (default KEYS[2]) value c.
local function badCounter(c, ckey)
  return redis.error_reply('ERR redislock: token counter ' .. (ckey or KEYS[2]) .. ' holds ' ..
    string.format('%q', string.sub(c, 1, 40)) .. ', not a token in 1..' .. MAX ..
    ' (or "token:offset", the offset in 1..' .. MAX .. ')')
end

-- bound returns max(counter, clock floor), at most MAX: at least every
-- token granted while the counter lived (each was written to it) and at
-- most the next grant's. Or an error reply.
local function bound(ckey)
  local _, _, nowstr = clock()
  local raw = redis.call('GET', ckey)
  local c, d = split(raw)
  if c == false then return badCounter(raw) end
  local f = nowstr
  if d ~= '0' then
    f = add(nowstr, d)
    if lt(MAX, f) then f = MAX end
  end
  if c and lt(f, c) then return c end
  return f
end
