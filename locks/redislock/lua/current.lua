-- current is the Sequencer's answer: the held grant's token, else the
-- counter or the clock floor, whichever is larger. KEYS: lock, counter.
-- Needs decimal.lua, counter.lua and heldtoken.lua.
return heldToken(KEYS[1]) or bound(KEYS[2])
