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
-- The products of the cost pass 2^53, so numbers are arrays of base-10^7
-- limbs, least significant first, parsed from and written as decimal
-- strings: no value goes through a double. The key's TTL is set in the same
-- step: it expires once the limit is as cold as a fresh one (plus the
-- slack), which forgets nothing.
local A = ARGV
local B = 10000000
local NEVER = '18446744073709551615'

local function trim(r)
  while #r > 1 and r[#r] == 0 do r[#r] = nil end
  return r
end

local function big(s)
  local r, i = {}, #s
  while i >= 1 do
    local j = i - 6
    if j < 1 then j = 1 end
    r[#r + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  return trim(r)
end

local function small(x)
  local r = {}
  repeat
    local d = x % B
    r[#r + 1] = d
    x = (x - d) / B
  until x == 0
  return r
end

local function str(a)
  local parts = {string.format('%d', a[#a])}
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
  return table.concat(parts)
end

local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function add(a, b)
  local r, c = {}, 0
  for i = 1, math.max(#a, #b) do
    local v = (a[i] or 0) + (b[i] or 0) + c
    if v >= B then r[i], c = v - B, 1 else r[i], c = v, 0 end
  end
  if c > 0 then r[#r + 1] = c end
  return r
end

-- a - b, for a >= b.
local function sub(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local v = a[i] - (b[i] or 0) - c
    if v < 0 then r[i], c = v + B, 1 else r[i], c = v, 0 end
  end
  return trim(r)
end

-- Each partial sum is below 10^7 + 10^14 + 10^7 < 2^53: exact.
local function mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local ai, c = a[i], 0
    if ai ~= 0 then
      for j = 1, #b do
        local v = r[i + j - 1] + ai * b[j] + c
        c = math.floor(v / B)
        r[i + j - 1] = v - c * B
      end
      local k = i + #b
      while c > 0 do
        local v = r[k] + c
        c = math.floor(v / B)
        r[k] = v - c * B
        k = k + 1
      end
    end
  end
  return trim(r)
end

-- Quotient and remainder: long division, one limb of the quotient at a
-- time by bisection.
local function divmod(a, b)
  local q, rem = {}, {0}
  for i = #a, 1, -1 do
    table.insert(rem, 1, a[i])
    trim(rem)
    local lo, hi = 0, B - 1
    while lo < hi do
      local mid = math.floor((lo + hi + 1) / 2)
      if cmp(mul(b, {mid}), rem) <= 0 then lo = mid else hi = mid - 1 end
    end
    q[i] = lo
    if lo > 0 then rem = sub(rem, mul(b, {lo})) end
  end
  return trim(q), rem
end

local function ceil_div(a, b)
  local q, r = divmod(a, b)
  if cmp(r, {0}) > 0 then q = add(q, {1}) end
  return q
end

local function min(a, b) if cmp(a, b) <= 0 then return a end return b end

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
local burst, l, t, permit = big(A[5]), big(A[6]), big(A[7]), big(A[8])
local threshold, max, gain, slope = big(A[9]), big(A[10]), big(A[11]), big(A[12])
local per_remainder, denominator = big(A[13]), big(A[14])
local zero = {0}

local F, S = {0}, max
local raw = redis.call('GET', KEYS[1])
if raw then
  local f, s = string.match(raw, '^(%d+) (%d+)$')
  if not f then
    return redis.error_reply('ERR tollgate: not a warm-up state: ' .. KEYS[1])
  end
  F, S = big(f), min(big(s), max)
end

-- When a state is as cold as a fresh one: F plus the time to regain what
-- its idle permits lack.
local function cold_at(f, s)
  return add(f, ceil_div(sub(max, s), gain))
end

local function after(x)
  if cmp(x, now) > 0 then return str(sub(x, now)) end
  return '0'
end

-- Idle permits at `now`: those at F, plus `gain` a nanosecond since.
local function idle()
  if cmp(now, F) <= 0 then return S end
  return min(max, add(S, mul(sub(now, F), gain)))
end

-- The cost in ns of `k` permits taken at `s` units, rounded up.
local function cost_of(s, k)
  local taken = min(mul(k, permit), s)
  local ramp = zero
  if cmp(s, threshold) > 0 then ramp = sub(s, threshold) end
  local a = min(taken, ramp)
  local whole, rest = divmod(mul(k, t), l)
  local area = mul(mul(slope, a), sub(add(ramp, ramp), a))
  return add(whole, ceil_div(add(mul(rest, per_remainder), area), denominator))
end

local function store(f, s)
  if op == 'p' then return end
  -- The TTL: until cold again, in whole ms rounded up, plus the slack.
  local ttl = ceil_div(sub(cold_at(f, s), now), {1000000})
  redis.call('SET', KEYS[1], str(f) .. ' ' .. str(s), 'PX', str(add(ttl, small(slack))))
end

local function take(s, k)
  return sub(s, min(mul(k, permit), s))
end

if op == 'r' then
  local ready = F
  if cmp(now, F) > 0 then ready = now end
  local s = idle()
  local f = add(ready, cost_of(s, cost))
  s = take(s, cost)
  store(f, s)
  return {1, '0', '0', after(cold_at(f, s)), str(ready)}
end

local owed = cmp(now, F) < 0
local reset = after(cold_at(F, S))
if cmp(cost, zero) == 0 then
  if owed then return {1, '0', '0', reset, str(now)} end
  return {1, str(burst), '0', reset, str(now)}
end
if owed then return {0, '0', str(sub(F, now)), reset, str(F)} end
if cmp(cost, burst) > 0 then return {0, str(burst), NEVER, reset, NEVER} end
local s = idle()
local f = add(now, cost_of(s, cost))
s = take(s, cost)
store(f, s)
return {1, '0', '0', after(cold_at(f, s)), str(now)}
