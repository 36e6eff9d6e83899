-- The state of a key's token bucket, shared by the store's scripts (decide.lua, charge.lua,
-- all.lua, lease.lua): a theoretical arrival time (GCRA), read and written with Redis's own clock.
--
-- This file holds the code that reads and writes the state, once, as Go text/template blocks
-- that each script places where it needs them (scripts.go assembles them). A script defines no
-- Lua function: Redis runs a script's whole body on every call, and a local function there is a
-- closure made anew each time, about 600 of Redis's instructions apiece (BENCHMARKS.md). Each
-- block says which locals it reads and which it sets; its own are local to it.
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
-- -, * of integers, x % m, and division of a multiple (x - x % m) / m are used, all exact for
-- integers whose sum is at most 2^53, so no result is ever rounded: the wait is the exact
-- distance, in whole microseconds rounded up (TIME's
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
-- function writes that policy after the state, ":<T>:<b>", unless it is the Store's own (the
-- state without it reads as that), and a state read at another policy
-- is rescaled to the new one keeping the tokens it holds (b - d/T, negative in debt), capped at
-- the new burst: d' = b'T' - (bT - d) * T'/T, rounded up to the nanosecond (a fraction of a
-- nanosecond's tokens fewer, never more). A full bucket is full at every policy, as a key never
-- seen is: its state is deleted when it is written full, and expires when it refills. A state
-- without the suffix was written at the caller's "default" policy (the Store's own), or, when
-- the caller names none, at the call's.
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
-- effects (SET, DEL), not the scripts. Older servers need the call in "prelude".

{{define "prelude"}}
if redis.replicate_commands then
	redis.replicate_commands()
end

-- maxd bounds d, TAT - now in nanoseconds: below 2^53 by more than the 999 nanoseconds that
-- are added to a multiple of 1000, so that d, and d - horizon + cost*T for cost*T <= horizon,
-- are exact.
local maxd = 9e15
{{end}}

{{define "clock"}}
-- clock sets now, the instant to decide at in Unix microseconds: arg, the caller's (tests), if
-- it is given and not empty, and otherwise Redis's TIME.
if arg and arg ~= '' then
	now = tonumber(arg)
else
	local t = redis.call('TIME')
	now = t[1] * 1000000 + t[2]
end
{{end}}

{{define "one key"}}
{{template "prelude"}}
-- one key reads the arguments of a script of one key (decide.lua, charge.lua) into key,
-- interval, burst, horizon, cost, now, tolerance, T0 and b0, and the key's state into d and
-- changed (see "read").
local key = KEYS[1]
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local horizon = burst * interval
local cost = tonumber(ARGV[3])
local now
local arg = ARGV[4]
{{template "clock"}}
local tolerance = 0
if ARGV[5] then
	tolerance = tonumber(ARGV[5])
end
local T0, b0 = ARGV[6], ARGV[7]
local d, changed, ago
{{template "read"}}
{{end}}

{{define "read"}}
-- read sets d, how far key's TAT lies ahead of now in nanoseconds (0 when it is behind: the
-- bucket is full) at the policy of interval and burst, changed, whether the state was repaired
-- or rescaled and must be written, and ago, how long the bucket has been full (maxd for a key
-- not there), when it is; tolerance is in nanoseconds. T0 and b0 (strings) are the policy of a
-- state written without one, when they are given, and otherwise the call's.
-- A value that is not a state these scripts write (another program's: a hash makes GET fail
-- with WRONGTYPE, a string that is no state, a number of more digits than a state has, or older
-- than any state lives by TIME) ends the script with a KEYSTATE error before anything is
-- written, so that it is never overwritten.
d, changed, ago = 0, false, maxd
do
	local v = redis.call('GET', key)
	if v then
		local T, b = interval, burst
		if T0 and T0 ~= '' then
			T, b = tonumber(T0), tonumber(b0)
		end
		local colon = string.find(v, ':', 1, true)
		if colon then
			if not string.find(v, '^:[1-9]%d*:[1-9]%d*$', colon) then
				return redis.error_reply('KEYSTATE ' .. key .. ' holds no limiter state')
			end
			local second = string.find(v, ':', colon + 1, true)
			T = tonumber(string.sub(v, colon + 1, second - 1))
			b = tonumber(string.sub(v, second + 1))
			v = string.sub(v, 1, colon - 1)
		end
		-- At most 16 digits of microseconds (until the year 2286), as every state written has.
		local dot = string.find(v, '.', 1, true)
		if not (not dot and #v <= 19 and string.find(v, '^%d%d%d%d+$')
			or dot and dot <= 17 and #v - dot <= 19 and string.find(v, '^%d+%.%d%d%d%d+$')) then
			return redis.error_reply('KEYSTATE ' .. key .. ' holds no limiter state')
		end
		local h = b * T
		local ns = tonumber(string.sub(v, -3))
		if dot then
			local tat = tonumber(string.sub(v, 1, dot - 1))
			local w = tonumber(string.sub(v, dot + 1, -4))
			if (w - now) * 1000 > tolerance then
				d, changed = (tat - w) * 1000 + ns, true
			else
				d = (tat - now) * 1000 + ns
			end
		else
			d = (tonumber(string.sub(v, 1, -4)) - now) * 1000 + ns
			if d > h + tolerance then
				d, changed = h, true
			end
		end
		if d < -maxd and not (arg and arg ~= '') then
			-- Full for longer than any state lives by Redis's clock (it expires when full): a
			-- number of another program's.
			return redis.error_reply('KEYSTATE ' .. key .. ' holds no limiter state')
		end
		if d < 0 then
			d, ago = 0, -d
		end
		-- A full bucket is full at every policy: the same as a key never seen.
		if d > 0 and (T ~= interval or b ~= burst) then
			-- The tokens held, b - d/T, at the new policy. x is exact but for its last bits
			-- past 2^53, where d is capped either way; x - x % 1 is its floor.
			local x = (h - d) * interval / T
			d = interval * burst - (x - x % 1)
			if d < 0 then
				d = 0
			elseif d > maxd then
				d = maxd
			end
			changed = true
		end
	end
end
{{end}}

{{define "carry"}}
-- carry adds to d the charge of owed tokens that a Store deferred ([WithDeferredCharges]), made
-- age nanoseconds before now, as if made then: a bucket not full now was not full then either,
-- and owes the charge on top; a full one owes it less the refill since then, or since it was full.
if owed > 0 then
	if d > 0 then
		d = d + owed * interval
	else
		d = owed * interval - math.min(ago, age)
	end
	if d < 0 then
		d = 0
	elseif d > maxd then
		d = maxd -- Past maxd the sum may be rounded, but only upwards of maxd, where it is capped.
	end
	changed = true
end
{{end}}

{{define "admit"}}
-- admit decides a request of cost tokens (cost <= burst) on the bucket full in d: it sets allowed
-- and wait (microseconds, rounded up) and, when admitted, spends what the block's argument names:
-- decide.lua's cost, or lease.lua's take, set here to the lot, within what the bucket holds.
-- over: how far the request overshoots the bucket, exact as long as d is (see maxd).
local over = (d - horizon) + cost * interval
if over <= 0 then
	allowed = 1
	wait = 0
	{{- if eq . "take"}}
	-- d <= horizon - cost*T here, so the bucket holds at least cost tokens.
	local x = horizon - d
	take = math.min(math.max(lot, cost), (x - x % interval) / interval)
	{{- end}}
	if {{.}} > 0 then
		d = d + {{.}} * interval
		changed = true
	end
else
	local x = over + 999
	wait = (x - x % 1000) / 1000
end
{{end}}

{{define "tag"}}
-- tag sets tag, the policy a write of a call of the policy Targ:barg (strings) carries: that
-- policy when the caller names a default (T0:b0, a Store with a policy per key) and it is
-- another, and otherwise none, which reads as the default.
tag = ''
if T0 and T0 ~= '' and (Targ ~= T0 or barg ~= b0) then
	tag = ':' .. Targ .. ':' .. barg
end
{{end}}

{{define "write"}}
-- write sets key's TAT to now + d nanoseconds, in debt past horizon, expiring when the bucket
-- is full, with the policy tag; a key whose bucket is full is deleted, the same as a key never
-- seen.
if d <= 0 then
	redis.call('DEL', key)
else
	local ns = d % 1000
	local us = now + (d - ns) / 1000
	local v
	if d > horizon then
		v = string.format('%d.%d%03d', us, now, ns)
	else
		v = string.format('%d%03d', us, ns)
	end
	local ms = d + 999999
	redis.call('SET', key, v .. tag, 'PX', (ms - ms % 1000000) / 1000000)
end
{{end}}
