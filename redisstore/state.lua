-- The state of a key's token bucket, shared by the store's scripts (decide.lua, charge.lua,
-- all.lua), which Go puts after this file: a theoretical arrival time (GCRA), read and written
-- with Redis's own clock.
--
-- The state is one string: the theoretical arrival time TAT, the instant at which the bucket
-- will be full again, as a decimal count of Unix nanoseconds. With an emission interval of T
-- nanoseconds per token and a burst of b tokens (horizon = b*T), the bucket holds
-- b - (TAT - now) / T tokens at now; a request of cost n is admitted iff
-- max(TAT, now) + n*T <= now + horizon, and then TAT becomes max(TAT, now) + n*T. A refused
-- request writes nothing, so it costs nothing. This is x/time/rate's token bucket, reserved and,
-- when refused, cancelled at the same instant, with the rate rounded to a whole nanosecond per
-- token.
--
-- Debt: a charge (charge.lua) moves TAT by n*T whether or not the bucket holds n tokens, so TAT
-- may lie beyond now + horizon: the key owes TAT - now - horizon, and every request, even of
-- cost 0, is refused until that is repaid. The arithmetic of a decision covers it as is. A debt
-- is capped so that TAT lies at most maxd (9e15 ns, about 104 days) ahead of now: a larger one
-- is forgiven down to that.
--
-- Arithmetic: Lua 5.1 numbers are doubles, exact for integers up to 2^53. Unix nanoseconds
-- (about 1.8e18) are not, so TAT is split into microseconds (about 1.8e15, exact) and the
-- nanoseconds left over (0..999), and every computation is done on d = TAT - now in
-- nanoseconds, which stays below maxd < 2^53 (the caller keeps the horizon below 2^52). Only +,
-- -, * of integers, math.fmod (exact) and division of an exact multiple are used, so no result
-- is ever rounded: the wait is the exact distance, in whole microseconds rounded up (TIME's
-- resolution), to the first instant at which the same request is admitted, and one microsecond
-- earlier it is not.
--
-- A clock that steps back (an NTP step, a failover to a host whose clock is behind): left
-- alone, a key would owe the whole step, and a step back of an hour would refuse its client for
-- an hour. Two forms of the state tell a step from a debt:
--
--   - "<TAT>", a key not in debt, the only form a decision writes: TAT was written at most
--     horizon ahead of the clock, and TIME moves forward, so d > horizon means that the clock
--     stepped back since the write. The key is repaired to an empty bucket as of now
--     (d = horizon): nothing is admitted that an empty bucket would not admit, and normal
--     counting resumes within one refill of the burst, whatever the size of the step.
--   - "<TAT us>.<W><ns>", a key in debt: TAT's microseconds, a dot, W, the instant of the write
--     in Unix microseconds, and TAT's three digits of nanoseconds. d > horizon is the debt; the
--     clock stepped back when now < W, and the key is then repaired to the state it had at W,
--     d = TAT - W: the step neither forgives the debt nor adds to it, and the time that passed
--     between the write and the step is not credited. A Store of a version before debts reads
--     this form as a number a fraction of a microsecond past TAT, a clock that stepped back:
--     it forgives the debt beyond an empty bucket rather than failing.
--
-- A policy per key (WithPolicyFunc): TAT counts tokens at one emission interval and burst, so a
-- key whose policy changes must be read at the policy it was written at. A Store with a policy
-- function writes that policy after the state, ":<T>:<b>", and a state read at another policy
-- is rescaled to the new one keeping the tokens it holds (b - d/T, negative in debt), capped at
-- the new burst: d' = b'T' - (bT - d) * T'/T, rounded up to the nanosecond (a fraction of a
-- nanosecond's tokens fewer, never more). A full bucket is full at every policy, as a key never
-- seen is: its state is deleted when it is written full, and expires when it refills. A state without the suffix was written at the
-- caller's "default" policy (the Store's own), or, when the caller names none, at the call's.
-- A Store of a version before policies cannot read the suffix: a fleet turns policies on once
-- every replica runs a version that has them.
--
-- A repair is written at once, even by a refusal or a peek. With the caller's clock (tests),
-- instants arrive out of order by design, and a tolerance says how far back (in nanoseconds)
-- they may be before the repair.
--
-- Expiry: once now >= TAT the state says "full", the same as no key at all, so the key is set
-- to expire ceil(d / 1 ms) after the write: for a key in debt, when the debt is repaid and the
-- burst refilled. TIME makes the scripts non-deterministic; Redis 5 and later replicate their
-- effects (SET, DEL), not the scripts. Older servers need the call below.

if redis.replicate_commands then
	redis.replicate_commands()
end

-- maxd bounds d, TAT - now in nanoseconds: below 2^53 by more than the 999 nanoseconds that
-- are added to a multiple of 1000, so that d, and d - horizon + cost*T for cost*T <= horizon,
-- are exact.
local maxd = 9e15

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

-- clock returns the instant to decide at, in Unix microseconds: arg, the caller's (tests), if
-- it is given and not empty, and otherwise Redis's TIME.
local function clock(arg)
	if arg and arg ~= '' then
		return tonumber(arg)
	end
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- read returns d, how far the key's TAT lies ahead of now in nanoseconds (0 when it is behind:
-- the bucket is full) at the policy of interval and burst, and whether the state was repaired
-- or rescaled and must be written; tolerance is in nanoseconds. T0 and b0 are the policy of a
-- state written without one, when they are given, and otherwise the call's.
local function read(key, now, interval, burst, tolerance, T0, b0)
	local v = redis.call('GET', key)
	if not v then
		return 0, false
	end
	if T0 == '' then
		T0, b0 = nil, nil
	end
	local T, b = tonumber(T0 or interval), tonumber(b0 or burst)
	local colon = string.find(v, ':', 1, true)
	if colon then
		local second = string.find(v, ':', colon + 1, true)
		T = tonumber(string.sub(v, colon + 1, second - 1))
		b = tonumber(string.sub(v, second + 1))
		v = string.sub(v, 1, colon - 1)
	end
	local horizon = b * T
	local ns = tonumber(string.sub(v, -3))
	local dot = string.find(v, '.', 1, true)
	local d, changed = 0, false
	if dot then
		local tat = tonumber(string.sub(v, 1, dot - 1))
		local w = tonumber(string.sub(v, dot + 1, -4))
		if (w - now) * 1000 > tolerance then
			d, changed = (tat - w) * 1000 + ns, true
		else
			d = math.max((tat - now) * 1000 + ns, 0)
		end
	else
		d = math.max((tonumber(string.sub(v, 1, -4)) - now) * 1000 + ns, 0)
		if d > horizon + tolerance then
			d, changed = horizon, true
		end
	end
	if d == 0 then
		return 0, false -- full, at every policy: the same as a key never seen
	end
	if T ~= interval or b ~= burst then
		-- The tokens held, b - d/T, at the new policy; the product is exact but for its last
		-- bits past 2^53, where the result is capped either way.
		d = interval * burst - math.floor((horizon - d) * interval / T)
		d = math.min(math.max(d, 0), maxd)
		changed = true
	end
	return d, changed
end

-- write sets the key's TAT to now + d nanoseconds, in debt past horizon, expiring when the
-- bucket is full, with the policy tag (":<T>:<b>", or ""); a key whose bucket is full is
-- deleted, the same as a key never seen.
local function write(key, now, d, horizon, tag)
	if d <= 0 then
		redis.call('DEL', key)
		return
	end
	local ns = math.fmod(d, 1000)
	local us = now + (d - ns) / 1000
	local v
	if d > horizon then
		v = string.format('%.0f.%.0f%03d', us, now, ns)
	else
		v = string.format('%.0f%03d', us, ns)
	end
	redis.call('SET', key, v .. tag, 'PX', divceil(d, 1000000))
end

-- tag returns the policy tag a write of a call of interval and burst carries: the policy when
-- the caller names a default (T0, a Store with a policy function), and otherwise none.
local function tag(interval, burst, T0)
	if T0 and T0 ~= '' then
		return ':' .. interval .. ':' .. burst
	end
	return ''
end
