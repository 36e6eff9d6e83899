-- A charge on one key, after the fact (state.lua explains the state and
-- holds the blocks this script places): cost
-- tokens spent whether or not the bucket holds them, so that the key may go into debt, or with a
-- negative cost given back, never beyond a full bucket.
--
-- KEYS[1]  the client's key.
-- ARGV[1]  T, the emission interval: nanoseconds per token (an integer >= 1).
-- ARGV[2]  burst, the bucket's size in tokens (an integer >= 1).
-- ARGV[3]  cost, the tokens to spend (> 0) or give back (< 0).
-- ARGV[4]  optional: the instant to charge at, in Unix microseconds, instead of TIME (tests
--          only); "" for TIME.
-- ARGV[5]  optional: how far back, in nanoseconds, that instant may lie before the clock is
--          taken to have stepped back (0 if absent).
-- ARGV[6]  optional, with ARGV[7]: the T and burst of the Store's own policy (see decide.lua).
-- ARGV[8]  optional: for a cost > 0, how many nanoseconds before now it was charged, for the
--          charges a Store deferred (see carry in state.lua); 0 if absent.
--
-- Returns the microseconds until the bucket is full, the key's Reset: in debt, more than a
-- refill of the burst.

{{template "one key"}}
local before = d
if cost > 0 then
	local owed, age = cost, 0
	if ARGV[8] then
		age = tonumber(ARGV[8])
	end
	{{template "carry"}}
elseif cost < 0 then
	local back = -cost * interval
	if back >= d then
		d = 0
	else
		d = d - back
	end
end
if changed or d ~= before then
	local tag
	local Targ, barg = ARGV[1], ARGV[2]
	{{template "tag"}}
	{{template "write"}}
end
local x = d + 999
return (x - x % 1000) / 1000
