-- Counter helpers of redlock's scripts. Needs decimal.lua.

-- counter(k) returns the counter and clock offset stored at k: c (nil when
-- none) and d ('0' when none). A malformed value raises the error reply
-- "FENCEGUARD_COUNTER <value>", before the calling script wrote anything.
local function counter(k)
  local v = redis.call('GET', k)
  local c, d = split(v)
  if c == false then
    return error({err = 'FENCEGUARD_COUNTER ' .. string.sub(v, 1, 40)})
  end
  return c, d
end

-- store writes counter c and offset d at k, expiring after idle ms.
local function store(k, c, d, idle)
  redis.call('SET', k, joined(c, d), 'PX', idle)
end

-- lead(v, now) is the offset that puts the clock's next µs at v:
-- v - 1 - now, or '0' when v is not ahead of now + 1.
local function lead(v, now)
  local n1 = incr(now)
  if not lt(n1, v) then return '0' end
  return sub(v, n1)
end
