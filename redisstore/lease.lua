-- A lease of one key's tokens, for a Leased (lease.go); state.lua explains the state and holds
-- the blocks this script places. It gives back what the replica held, then decides a request of cost n and, when it is
-- admitted, takes for the replica as many tokens as it can, up to the lot, and at least n: all or
-- nothing for n. A charge spends n whether or not the bucket holds it (into debt). The state is
-- read and written only through state.lua's "read" and "write", once each, with the same exact
-- integer arithmetic as decide.lua, whose "admit" block it places too.
--
-- KEYS[1]  the client's key.
-- ARGV[1]  T, the emission interval: nanoseconds per token (an integer >= 1).
-- ARGV[2]  burst, the bucket's size in tokens (an integer >= 1).
-- ARGV[3]  n, the cost of the request (an integer >= 0).
-- ARGV[4]  lot, the most tokens to take (an integer >= n, or 0 with n = 0: take nothing).
-- ARGV[5]  back, nanoseconds of the bucket's time to give back first (an integer >= 0): the
--          replica's lease, never more than it was given; the bucket is never more than full.
-- ARGV[6]  "1" to charge n whether or not the bucket holds it, "0" to decide.
-- ARGV[7]  optional: the instant to decide at, in Unix microseconds, instead of TIME (tests only).
-- ARGV[8]  optional: how far back, in nanoseconds, that instant may lie before the clock is
--          taken to have stepped back (0 if absent).
--
-- Returns {allowed (1 or 0), the tokens taken (n included; 0 when refused), wait in
--          microseconds (-1: never; 0 when allowed), d: nanoseconds until the bucket is full,
--          after the call}.

{{template "prelude"}}
local key = KEYS[1]
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local lot = tonumber(ARGV[4])
local back = tonumber(ARGV[5])
local charge = ARGV[6] == '1'
local horizon = burst * interval
local now
local arg = ARGV[7]
{{template "clock"}}
local tolerance = 0
if ARGV[8] then
	tolerance = tonumber(ARGV[8])
end
local T0, b0 -- none: a lease is of the Store's one policy
local d, changed, ago
{{template "read"}}

if back > 0 and d > 0 then
	if back >= d then
		d = 0
	else
		d = d - back
	end
	changed = true
end

local allowed = 0
local take = 0
local wait = -1
if charge then
	allowed = 1
	wait = 0
	take = cost
	if cost > 0 then
		-- Past maxd the sum may be rounded, but only upwards of maxd, where it is capped.
		d = math.min(d + cost * interval, maxd)
		changed = true
	end
elseif cost <= burst then
	{{template "admit" "take"}}
end
if changed then
	local tag = ''
	{{template "write"}}
end
return {allowed, take, wait, d}
