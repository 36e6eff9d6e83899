-- A token bucket kept as a theoretical arrival time (GCRA), decided with Redis's own clock.
--
-- KEYS[1]  the client's key.
-- ARGV[1]  T, the emission interval: nanoseconds per token (an integer >= 1).
-- ARGV[2]  burst, the bucket's size in tokens (an integer >= 1).
-- ARGV[3]  cost, the tokens this request takes (an integer >= 0).
-- ARGV[4]  optional: the instant to decide at, in Unix microseconds, instead of TIME (tests only).
-- ARGV[5]  optional: how far, in nanoseconds, TAT may lie beyond a full bucket's debt before the
--          clock is taken to have stepped back (0 if absent; see below).
--
-- Returns {allowed (1 or 0), wait in microseconds (-1: never; 0 when allowed),
--          remaining tokens after the request, microseconds until the bucket is full}.
--
-- The state is one string: the theoretical arrival time TAT, the instant at which the bucket
-- will be full again, as a decimal count of Unix nanoseconds. The bucket holds
-- burst - (TAT - now) / T tokens at now; a request of cost n is admitted iff
-- max(TAT, now) + n*T <= now + burst*T, and then TAT becomes max(TAT, now) + n*T. A refused request
-- writes nothing, so it costs nothing. This is x/time/rate's token bucket, reserved and, when
-- refused, cancelled at the same instant, with the rate rounded to a whole nanosecond per token.
--
-- Arithmetic: Lua 5.1 numbers are doubles, exact for integers up to 2^53. Unix nanoseconds
-- (about 1.8e18) are not, so TAT is split into microseconds (about 1.8e15, exact) and the
-- nanoseconds left over (0..999), and every computation is done on d = TAT - now in
-- nanoseconds, which the caller keeps below 2^52 by bounding burst*T. Only +, -, * of integers,
-- math.fmod (exact) and division of an exact multiple are used, so no result is ever rounded:
-- the wait is the exact distance, in whole microseconds rounded up (TIME's resolution), to the
-- first instant at which the same request is admitted, and one microsecond earlier it is not.
--
-- A clock that steps back: TAT is written at most burst*T ahead of now, and TIME moves forward,
-- so d > burst*T means that the clock stepped back since the write (an NTP step, a failover to
-- a host whose clock is behind). Left alone, the key would owe the whole step: a step back of
-- an hour would refuse its client for an hour. Instead the key is repaired to an empty bucket
-- as of now (d = burst*T, written even by a refusal or a peek): nothing is admitted that an
-- empty bucket would not admit, and normal counting resumes within one refill of the burst,
-- whatever the size of the step. With the caller's clock (tests), instants arrive out of order
-- by design, and ARGV[5] says how far back they may be before that repair.
--
-- Expiry: once now >= TAT the state says "full", the same as no key at all, so the key is set
-- to expire ceil(d / 1 ms) after the write. TIME makes the script non-deterministic; Redis 5
-- and later replicate its effects (the SET), not the script. Older servers need the call below.

if redis.replicate_commands then
	redis.replicate_commands()
end

-- divfloor returns floor(x / m) and divceil ceil(x / m), exactly, for integers x >= 0, m >= 1.
local function divfloor(x, m)
	return (x - math.fmod(x, m)) / m
end
local function divceil(x, m)
	local r = math.fmod(x, m)
	if r == 0 then
		return (x - r) / m
	end
	return (x - r) / m + 1
end

local key = KEYS[1]
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local horizon = burst * interval

local now
if ARGV[4] then
	now = tonumber(ARGV[4])
else
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- d: how far TAT lies ahead of now, in nanoseconds; 0 when it is behind (the bucket is full).
local d = 0
local changed = false -- whether the state must be written
local tat = redis.call('GET', key)
if tat then
	d = (tonumber(string.sub(tat, 1, -4)) - now) * 1000 + tonumber(string.sub(tat, -3))
	if d < 0 then
		d = 0
	elseif d > horizon + tonumber(ARGV[5] or 0) then
		d = horizon
		changed = true
	end
end

-- write sets TAT to now + d nanoseconds, expiring when the bucket is full.
local function write(d)
	local ns = math.fmod(d, 1000)
	local us = now + (d - ns) / 1000
	redis.call('SET', key, string.format('%.0f%03d', us, ns), 'PX', divceil(d, 1000000))
end

local allowed = 0
local wait = -1
if cost <= burst then
	local new = d + cost * interval
	if new <= horizon then
		allowed = 1
		wait = 0
		if cost > 0 then
			d = new
			changed = true
		end
	else
		wait = divceil(new - horizon, 1000)
	end
end
if changed then
	write(d)
end

local remaining = 0
if d < horizon then
	remaining = divfloor(horizon - d, interval)
end
return {allowed, wait, remaining, divceil(d, 1000)}
