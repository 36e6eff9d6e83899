-- The decision of one request on one key (state.lua explains the state and holds the blocks
-- this script places).
--
-- KEYS[1]  the client's key.
-- ARGV[1]  T, the emission interval: nanoseconds per token (an integer >= 1).
-- ARGV[2]  burst, the bucket's size in tokens (an integer >= 1).
-- ARGV[3]  cost, the tokens this request takes (an integer >= 0).
-- ARGV[4]  optional: the instant to decide at, in Unix microseconds, instead of TIME (tests
--          only); "" for TIME.
-- ARGV[5]  optional: how far back, in nanoseconds, that instant may lie before the clock is
--          taken to have stepped back (0 if absent).
-- ARGV[6]  optional, with ARGV[7]: the T and burst of the Store's own policy, given by a Store
--          with a policy per key, which then writes the call's policy with the state ("" for
--          none).
-- ARGV[8]  optional, with ARGV[9]: tokens a Store deferred charging (see carry in state.lua),
--          and how many nanoseconds before now the last of those charges was made.
-- ARGV[10] optional: how far away, in nanoseconds, a place may be promised: a request whose
--          wait is at most that is admitted at its place, spent now as of then, and its wait
--          returned (see Store.Reserve).
--
-- Returns {allowed (1 or 0), wait in microseconds (-1: never; 0 when allowed at once),
--          remaining tokens after the request, d: nanoseconds until the bucket is full}. The
--          store rounds d up to Reset's microseconds, and keeps it whole to answer a refusal it
--          remembers as this script would later.

{{template "one key"}}
local owed, age = 0, 0
if ARGV[8] then
	owed, age = tonumber(ARGV[8]), tonumber(ARGV[9])
end
{{template "carry"}}

local allowed = 0
local wait = -1
if cost <= burst then
	{{template "admit" "cost"}}
	if allowed == 0 and ARGV[10] and (d - horizon) + cost * interval <= tonumber(ARGV[10]) then
		allowed = 1
		d = d + cost * interval
		changed = true
	end
end
if changed then
	local tag
	local Targ, barg = ARGV[1], ARGV[2]
	{{template "tag"}}
	{{template "write"}}
end

local remaining = 0
if d < horizon then
	local x = horizon - d
	remaining = (x - x % interval) / interval
end
return {allowed, wait, remaining, d}
