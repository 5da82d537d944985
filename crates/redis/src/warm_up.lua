-- tollgate: one warm-up limit (the core's algorithm::warm_up, Guava's
-- SmoothWarmingUp), the same integer arithmetic as the core's transition.
--
-- KEYS[1]  the state: "F S", F the instant the next request may go (ns), S
--          the idle permits at F (units); absent: cold, as fresh.
-- ARGV     op ('c' check, 'p' peek, 'r' reserve), now in ns ('' for the
--          server's TIME), cost, slack (ms added to the TTL), then the
--          limit's constants (WarmUp::constants): burst l t permit threshold
--          max gain slope per_remainder denominator. Every number is a
--          decimal string of digits.
-- Reply    {allowed (0/1), remaining, retry_after_ns, reset_after_ns,
--          ready_ns}, the last four as decimal strings. 'r' always reserves
--          (allowed 1) and answers the instant the permits are ready.
--
-- Runs after src/bignum.lua and src/warm_math.lua (SOURCE_WARM_UP), whose
-- exact naturals carry the products of the cost past 2^53. The key's TTL is
-- set in the same step: it expires once the limit is as cold as a fresh one
-- (plus the slack), which forgets nothing.
local A = ARGV
local NEVER = '18446744073709551615'
local N = bignum()
local big, str, small, cmp, add, sub = N.big, N.str, N.small, N.cmp, N.add, N.sub

local function digits(s) return type(s) == 'string' and string.find(s, '^%d+$') ~= nil end

local op = A[1]
if not ((op == 'c' or op == 'p' or op == 'r') and #A == 14 and #KEYS == 1
    and (A[2] == '' or digits(A[2]))) then
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(A, ' '))
end
for i = 3, 14 do
  if not digits(A[i]) then
    return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(A, ' '))
  end
end
local now
if A[2] == '' then
  local t = redis.call('TIME')
  now = big(t[1] .. string.format('%06d', tonumber(t[2])) .. '000')
else
  now = big(A[2])
end
local cost, slack = big(A[3]), tonumber(A[4])
local burst = big(A[5])
local k = {
  burst = burst, l = big(A[6]), t = big(A[7]), permit = big(A[8]), threshold = big(A[9]),
  max = big(A[10]), gain = big(A[11]), slope = big(A[12]), per_remainder = big(A[13]),
  denominator = big(A[14]),
}
local W = warm_math(N, k)
local zero = {0}

local F, S = {0}, k.max
local raw = redis.call('GET', KEYS[1])
if raw then
  F, S = W.parse(raw)
  if not F then
    return redis.error_reply('ERR tollgate: not a warm-up state: ' .. KEYS[1])
  end
end

local function after(x)
  if cmp(x, now) > 0 then return str(sub(x, now)) end
  return '0'
end

local function store(f, s)
  if op == 'p' then return end
  -- The TTL: until cold again, in whole ms rounded up, plus the slack.
  local ttl = N.ceil_div(sub(W.cold_at(f, s), now), {1000000})
  redis.call('SET', KEYS[1], W.format(f, s), 'PX', str(add(ttl, small(slack))))
end

if op == 'r' then
  local ready = F
  if cmp(now, F) > 0 then ready = now end
  local s = W.idle(F, S, now)
  local f = add(ready, W.cost(s, cost))
  s = W.take(s, cost)
  store(f, s)
  return {1, '0', '0', after(W.cold_at(f, s)), str(ready)}
end

local owed = cmp(now, F) < 0
local reset = after(W.cold_at(F, S))
if cmp(cost, zero) == 0 then
  if owed then return {1, '0', '0', reset, str(now)} end
  return {1, str(burst), '0', reset, str(now)}
end
if owed then return {0, '0', str(sub(F, now)), reset, str(F)} end
if cmp(cost, burst) > 0 then return {0, str(burst), NEVER, reset, NEVER} end
local s = W.idle(F, S, now)
local f = add(now, W.cost(s, cost))
s = W.take(s, cost)
store(f, s)
return {1, '0', '0', after(W.cold_at(f, s)), str(now)}
