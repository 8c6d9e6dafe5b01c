-- Helpers on canonical decimal strings (digits, no sign, no leading zero),
-- shared by the Redis lockers' scripts. Tokens never become Lua numbers,
-- which are doubles, exact only below 2^53.

-- MAX is the tokens' ceiling, 2^63 - 1.
local MAX = '9223372036854775807'

-- lt reports a < b: the shorter is smaller; of equal length, the first
-- differing digit decides (bytes, not the locale's collation).
local function lt(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

-- canon reports whether s is a canonical decimal in 1..max.
local function canon(s, max)
  if type(s) ~= 'string' or not string.find(s, '^[1-9]%d*$') then return false end
  return not lt(max, s)
end

-- add returns a + b (either may be '0'), digit by digit.
local function add(a, b)
  local r, carry = {}, 0
  local i, j = #a, #b
  while i > 0 or j > 0 or carry > 0 do
    local x = carry
    if i > 0 then x = x + string.byte(a, i) - 48 end
    if j > 0 then x = x + string.byte(b, j) - 48 end
    if x >= 10 then x, carry = x - 10, 1 else carry = 0 end
    r[#r + 1] = string.char(48 + x)
    i, j = i - 1, j - 1
  end
  local s = string.gsub(string.reverse(table.concat(r)), '^0+', '')
  if s == '' then return '0' end
  return s
end

-- sub returns a - b for b <= a, digit by digit.
local function sub(a, b)
  local r, borrow = {}, 0
  local i, j = #a, #b
  while i > 0 do
    local x = string.byte(a, i) - 48 - borrow
    if j > 0 then x = x - (string.byte(b, j) - 48) end
    if x < 0 then x, borrow = x + 10, 1 else borrow = 0 end
    r[#r + 1] = string.char(48 + x)
    i, j = i - 1, j - 1
  end
  local s = string.gsub(string.reverse(table.concat(r)), '^0+', '')
  if s == '' then return '0' end
  return s
end

-- incr returns s + 1.
local function incr(s)
  local i = #s
  while i > 0 and string.byte(s, i) == 57 do i = i - 1 end -- trailing 9s
  if i == 0 then return '1' .. string.rep('0', #s) end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end

-- clock reads the server clock: ms and µs as Lua numbers (exact, far
-- below 2^53: for expiry and queue order), and µs as a decimal string.
local function clock()
  local t = redis.call('TIME')
  local s, us = t[1], t[2]
  return tonumber(s) * 1000 + math.floor(tonumber(us) / 1000),
    tonumber(s) * 1000000 + tonumber(us),
    s .. string.rep('0', 6 - #us) .. us
end

-- split reads a counter key's value raw (false: no key): the counter c
-- (nil when none) and the clock offset d ('0' when none); false when raw
-- is not "c" or "c:d" with c and d canonical in 1..MAX.
local function split(raw)
  if not raw then return nil, '0' end
  local i = string.find(raw, ':', 1, true)
  if not i then
    if canon(raw, MAX) then return raw, '0' end
    return false
  end
  local c, d = string.sub(raw, 1, i - 1), string.sub(raw, i + 1)
  if canon(c, MAX) and canon(d, MAX) then return c, d end
  return false
end

-- joined is the counter key's value for counter c and offset d.
local function joined(c, d)
  if d == '0' then return c end
  return c .. ':' .. d
end
