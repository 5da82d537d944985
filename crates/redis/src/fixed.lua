-- tollgate, lean path: one fixed window limit, check or peek. Same contract
-- and state as decide.lua, a compact reply (see docs/scripts.md, "The lean
-- reply"): headroom · (period + 1) + the window's time left (clock units),
-- negated minus 1 for a denial; decide.lua's full reply where that number
-- would not be exact, and for a control's marker. No tables but those
-- replies, no closures, one GET and at most one SET.
local A = ARGV
local num = tonumber
local op, cost, slack, stamp = A[1], num(A[3]), num(A[4]), num(A[5])
-- (x and the two zeros below: the client's '0' read without a call.)
local period, limit, x = num(A[7]), num(A[8]), A[11] == '0' and 0 or num(A[11])
local now, unit = A[2], 1
local fmod = math.fmod
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
  unit = 1000
else
  now = num(now)
end
-- Validation without function calls, as in gcra.lua (the two unused numbers
-- of a fixed window are 0, as decide.lua wants them).
if not (now and cost and slack and stamp and period and limit and x
    and (op == 'c' or op == 'p') and A[6] == 'f' and (A[9] == '0' or num(A[9]) == 0)
    and (A[10] == '0' or num(A[10]) == 0)
    and #A == 11 and #KEYS == 1 and now >= 0 and cost >= 0 and slack >= 0 and stamp >= 0
    and period >= 1 and limit >= 1 and x >= 0
    and now % 1 + cost % 1 + slack % 1 + stamp % 1 + period % 1 + limit % 1 + x % 1 == 0
    and now < 9007199254740992 and cost < 9007199254740992 and stamp < 9007199254740992
    and x < 9007199254740992 and slack <= 86400000
    and period < 4503599627370496 and limit < 9007199254740992) then
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(A, ' '))
end
local window = (now - fmod(now, period)) / period
local count = 0
local raw = redis.pcall('GET', KEYS[1])
-- An allow-listed key (its marker '!a', an interned string: one pointer
-- comparison) is decided on the state its list holds aside (controls.lua),
-- as a look: admitted, nothing counted, reporting what the look would
-- leave, or 0 (prelude.lua's listed_reply).
local listed = raw == '!a'
if listed then raw, op = redis.pcall('GET', KEYS[1] .. '!held'), 'p' end
if type(raw) == 'string' then
  local w, c = string.match(raw, '^(%d+) (%d+)$')
  w, c = num(w), num(c)
  -- A foreign value reads as no state; an earlier reading is decided in the
  -- stored window (no re-credit). A count past the limit is a charge's debt
  -- up to (DEBT_PERIODS + 1) · limit (prelude.lua), carried into later
  -- windows less `limit` a window.
  if w and w < 9007199254740992 and c <= limit * 17 then
    if w >= window then
      window, count = w, c
    elseif c > (window - w) * limit then
      count = c - (window - w) * limit
    end
  elseif not listed and string.byte(raw, 1) == 33 then
    -- A control's marker (src/controls.rs), only read where a state is not.
    local kind = string.sub(raw, 2, 2)
    if kind == 'd' then return {0, 0, now, 0, 0, -1, -1} end
    if kind == 'p' then
      local e = num(string.sub(raw, 3))
      if e == nil then return {0, 0, now, 0, 0, -1, -1} end
      if e > now then
        local left = (e - now) * unit
        return {0, 0, now, 0, 0, left, left}
      end
    end
  end
end
if count > limit then
  -- In debt: the general form (decide.lua's fixed window), the waits until
  -- the window whose carried count leaves room (the core's until_window).
  local r = fmod(count, limit)
  local at = (window + (count - r) / limit + (r > 0 and 1 or 0)) * period
  local reset = at > now and (at - now) * unit or 0
  if listed then return {1, 0, now, 1, 0, 0, reset} end
  local retry = -1
  if cost <= limit then
    local over = count + cost - limit
    r = fmod(over, limit)
    at = (window + (over - r) / limit + (r > 0 and 1 or 0)) * period
    retry = at > now and (at - now) * unit or 0
  end
  return {0, 0, now, 0, 0, retry, reset}
end
local window_end = (window + 1) * period
local left = window_end - now
if left < 0 then left = 0 end
-- The compact reply is exact while (limit + 1) · (period + 1) < 2^53 (the
-- product rounds up, never down, past 2^53) and the time left is within a
-- period (it is not for a reading in a later stored window).
local span = period + 1
local packed = left <= period and (limit + 1) * span < 9007199254740992
if cost <= limit - count then
  local used = count + cost
  if op == 'c' and cost > 0 then
    local ns = left * unit
    local r = fmod(ns, 1000000)
    local ttl = (ns - r) / 1000000 + slack
    if r > 0 then ttl = ttl + 1 end
    redis.call('SET', KEYS[1], string.format('%d %d', window, used), 'PX', ttl)
  end
  if packed and not listed then return (limit - used) * span + left end
  local reset, taken = 0, 0
  if used > 0 then reset = left * unit end
  if op == 'c' then taken = cost end
  return {1, taken, now, 1, limit - used, 0, reset}
end
if packed and not listed then return -1 - ((limit - count) * span + left) end
left = left * unit
local retry = -1
if cost <= limit then retry = left end
local reset = 0
if count > 0 then reset = left end
if listed then return {1, 0, now, 1, 0, 0, reset} end
return {0, 0, now, 0, limit - count, retry, reset}
