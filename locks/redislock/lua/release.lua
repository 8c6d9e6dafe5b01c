-- release, second part (after decimal.lua, counter.lua, mint.lua and
-- handover.lua): hand the lock over to the next waiter.
handOver(ARGV[2], ARGV[3])
return 1
