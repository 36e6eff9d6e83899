-- The decision of one request in several layers, all or nothing (state.lua explains the state
-- and holds the blocks this script places): each layer's key is reserved its cost at one instant and, if any layer
-- cannot admit it then, nothing is written; otherwise every reservation is.
--
-- KEYS[i]        the key of layer i; several layers may name the same key.
-- ARGV[1]        the instant to decide at, in Unix microseconds, or "" for TIME (tests only).
-- ARGV[8i-6..8i+1] layer i's T (nanoseconds per token), burst, cost (>= 0; 0 for a layer
--                charged afterwards), how far back, in nanoseconds, the instant may lie
--                before the clock is taken to have stepped back (0 but with the caller's clock),
--                the T and burst of its Store's own policy when the Store has a policy per key,
--                "" otherwise (see decide.lua), and the tokens its Store deferred charging to
--                the key and how many nanoseconds before now the last was charged (0 and 0 for
--                none; see carry in state.lua), which the first layer that names the key
--                carries, admitted or not. A T of 0 is a layer without limit
--                (a key's policy at rate.Inf): it fits, with its burst remaining, and its key
--                is neither read nor written.
--
-- Returns four integers per layer, as decide.lua does for one: {fits (1 or 0), wait in
-- microseconds until it fits (-1: never; 0 when it fits), remaining tokens, nanoseconds until
-- the bucket is full}. The request is admitted iff every layer fits; remaining and the time
-- until full are after the request when it is admitted, and as they were otherwise.
--
-- Layers that name the same key reserve one after the other, each seeing the reservations
-- before it, as x/time/rate's reservations do, so that the largest wait is the exact wait until
-- they all fit: the reservations of a key at now + wait are those at now, less wait.

{{template "prelude"}}
local now
local arg = ARGV[1]
{{template "clock"}}
local n = #KEYS

local d0 = {}      -- key -> d as read (repaired if need be)
local dk = {}      -- key -> d with the reservations of the layers so far
local repaired = {} -- key -> whether the state was repaired and must be written
local horizon = {} -- key -> horizon of the last layer that names it, for the write
local tags = {}    -- key -> the policy tag of that layer
local out = {}
local admitted = true
for i = 1, n do
	local key = KEYS[i]
	local a = 8 * i - 6
	local interval = tonumber(ARGV[a])
	local burst = tonumber(ARGV[a + 1])
	local cost = tonumber(ARGV[a + 2])
	local h = burst * interval
	local wait = 0
	if interval ~= 0 then
		local tolerance = tonumber(ARGV[a + 3])
		local T0, b0 = ARGV[a + 4], ARGV[a + 5]
		if dk[key] == nil then
			local d, changed, ago
			{{template "read"}}
			local owed, age = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
			{{template "carry"}}
			d0[key], repaired[key], dk[key] = d, changed, d
		end
		horizon[key] = h
		local tag
		local Targ, barg = ARGV[a], ARGV[a + 1]
		{{template "tag"}}
		tags[key] = tag
		wait = -1
		if cost <= burst then
			local over = (dk[key] - h) + cost * interval
			if over <= 0 then
				wait = 0
			else
				local x = over + 999
				wait = (x - x % 1000) / 1000
			end
			dk[key] = math.min(dk[key] + cost * interval, maxd)
		end
	end
	if wait ~= 0 then
		admitted = false
	end
	out[4 * i - 3] = wait == 0 and 1 or 0
	out[4 * i - 2] = wait
end

-- Each key is written once, in the order of KEYS, if it was spent or repaired.
for i = 1, n do
	local key = KEYS[i]
	local h = horizon[key]
	if h then
		horizon[key] = nil
		if not admitted then
			dk[key] = d0[key]
		end
		if dk[key] ~= d0[key] or repaired[key] then
			local d, horizon, tag = dk[key], h, tags[key]
			{{template "write"}}
		end
	end
end

for i = 1, n do
	local a = 8 * i - 6
	local interval = tonumber(ARGV[a])
	local h = tonumber(ARGV[a + 1]) * interval
	local di = dk[KEYS[i]]
	local remaining = 0
	if interval == 0 then
		remaining, di = tonumber(ARGV[a + 1]), 0
	elseif di < h then
		local x = h - di
		remaining = (x - x % interval) / interval
	end
	out[4 * i - 1] = remaining
	out[4 * i] = di
end
return out
