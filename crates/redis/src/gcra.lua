-- tollgate, lean path: one GCRA limit, check or peek. Same contract and state
-- as decide.lua, a compact reply (see docs/scripts.md, "The lean reply"):
-- admitted, the TAT's distance from now after the call (reset, in ticks);
-- denied, -1 - the debt; a control's marker, decide.lua's full reply. No
-- tables but a marker's reply, no closures, one GET and at most one SET.
local A = ARGV
local num = tonumber
local op, now, cost, slack, scale, iv, cap, m, us
if #A == 2 then
  -- The short form `interval capacity` (docs/scripts.md, "The short form"):
  -- a check of cost 1 on the server's clock, with the client's default
  -- slack of 10 ms and scale 1 (so `m` 9e12 and `us` 1000, valid by
  -- construction). Each argument not sent is a string Redis does not parse
  -- and Lua does not make, and what is not sent needs no validation.
  iv, cap = num(A[1]), num(A[2])
  if not (iv and cap and #KEYS == 1 and iv >= 1 and cap >= iv
      and cap < 4503599627370496 and iv % 1 + cap % 1 == 0) then
    return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(A, ' '))
  end
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
  op, cost, slack, scale, m, us = 'c', 1, 10, 1, 9000000000000, 1000
else
  -- The values the client nearly always sends (cost 1, stamp and x 0, scale
  -- 1, its default slack of 10 ms and the modulus m of scale 1 on the
  -- server's clock) without a call: `tonumber` is a C call and a `strtod`,
  -- comparing two (interned) strings is not.
  op, now = A[1], A[2]
  cost = A[3] == '1' and 1 or num(A[3])
  slack = A[4] == '10' and 10 or num(A[4])
  local stamp = A[5] == '0' and 0 or num(A[5])
  scale = A[7] == '1' and 1 or num(A[7])
  iv, cap = num(A[8]), num(A[9])
  m = A[10] == '9000000000000' and 9000000000000 or num(A[10])
  local x = A[11] == '0' and 0 or num(A[11])
  us = scale
  if now == '' then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
    us = scale and scale * 1000
  else
    now = num(now)
  end
  -- `us`: ticks per clock unit (on the server's clock 1000 · scale, the
  -- unit being 1 µs; in test mode scale, the unit being 1 ns). Validation
  -- without function calls (they cost): every number present, whole (the
  -- fractional parts of non-negative numbers sum to 0 only if each is 0;
  -- nan and inf give nan), and in range; `stamp` and `x`, unused by a
  -- check or a peek, are natural numbers as in decide.lua.
  if not (now and cost and slack and stamp and scale and iv and cap and m and x
      and (op == 'c' or op == 'p') and A[6] == 'g' and #A == 11 and #KEYS == 1
      and now >= 0 and cost >= 0 and slack >= 0 and stamp >= 0 and scale >= 1 and iv >= 1
      and m >= 1 and x >= 0 and now % 1 + cost % 1 + slack % 1 + stamp % 1 + scale % 1
      + iv % 1 + cap % 1 + m % 1 + x % 1 == 0
      and now < 9007199254740992 and cost < 9007199254740992 and stamp < 9007199254740992
      and x < 9007199254740992
      and slack <= 86400000 and scale <= 16 and cap >= iv and cap < 4503599627370496
      and m * us <= 9000000000000000 and (m + 1) * us > 9000000000000000) then
    return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(A, ' '))
  end
end
local M = m * us
-- The TAT modulo M, now modulo M: the debt is their difference modulo M, read
-- as 0 (a TAT in the past) in the last 2e15 ticks below M. `a % b` is
-- Lua's `a - floor(a / b) * b`, exact here where `math.fmod` is a C call:
-- for whole 0 <= a < 2^53 and b >= 1, a / b errs by at most a / b * 2^-53
-- < 1 / b, less than its distance to any integer it is not, so the floor
-- is the true quotient's and the product and difference are whole and
-- below 2^53.
local cur = (now % m) * us
local debt = 0
local raw = redis.pcall('GET', KEYS[1])
-- An allow-listed key (its marker '!a', an interned string: one pointer
-- comparison) is decided on the state its list holds aside (controls.lua).
local listed = raw == '!a'
if listed then raw = redis.pcall('GET', KEYS[1] .. '!held') end
local tat = num(raw)
if tat and tat >= 0 and tat < M and tat % 1 == 0 then
  debt = tat - cur
  if debt < 0 then debt = debt + M end
  if debt > M - 2000000000000000 then debt = 0 end
elseif not listed and type(raw) == 'string' and string.byte(raw, 1) == 33 then
  -- A control's marker (src/controls.rs), only read where a state is not.
  local kind = string.sub(raw, 2, 2)
  if kind == 'd' then return {0, 0, now, 0, 0, -1, -1} end
  if kind == 'p' then
    local e = num(string.sub(raw, 3))
    if e == nil then return {0, 0, now, 0, 0, -1, -1} end
    if e > now then
      local left = (e - now) * us
      return {0, 0, now, 0, 0, left, left}
    end
  end
end
local wanted = debt + cost * iv
if listed then
  -- Admitted, nothing counted, reporting a look of `cost` at the state
  -- held aside (prelude.lua's listed_reply): what it would leave, or 0.
  if wanted <= cap then return {1, 0, now, 1, cap - wanted, 0, wanted} end
  return {1, 0, now, 1, 0, 0, debt}
end
if wanted > cap then return -1 - debt end
if op == 'c' and cost > 0 then
  local d = scale * 1000000
  local r = wanted % d -- exact, as above: wanted <= cap < 2^52
  local ttl = (wanted - r) / d + slack
  if r > 0 then ttl = ttl + 1 end
  -- (cur + wanted) mod M, without forming a sum above 2^53.
  local tat = wanted - (M - cur)
  if tat < 0 then tat = tat + M end
  -- Both as '%d' (exact: whole numbers below 2^53 in a C long): a number
  -- passed as it is, Redis 7.0 writes with snprintf('%.17g'), 1,700
  -- instructions more than this call for the TAT, 300 for the TTL
  -- (callgrind).
  local format = string.format
  redis.call('SET', KEYS[1], format('%d', tat), 'PX', format('%d', ttl))
end
return wanted
