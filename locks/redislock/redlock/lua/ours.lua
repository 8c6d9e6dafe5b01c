-- ours(v, id) reports whether the lock's value v belongs to grant id, with
-- or without its token.
local function ours(v, id)
  return v == id or (type(v) == 'string' and string.sub(v, 1, #id + 1) == id .. '|')
end
