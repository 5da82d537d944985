-- tollgate, lean path: one fixed window limit, check or peek. Same contract,
-- state and reply as decide.lua (see src/script.rs), specialised: no tables
-- but the reply, no closures, one GET and at most one SET.
local A = ARGV
local op, cost, slack = A[1], tonumber(A[3]), tonumber(A[4])
local period, limit, x = tonumber(A[7]), tonumber(A[8]), tonumber(A[11])
local now, unit = A[2], 1
local fmod = math.fmod
if now == '' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
  unit = 1000
else
  now = tonumber(now)
end
-- Validation without function calls, as in gcra.lua.
if not (now and cost and slack and period and limit and x and (op == 'c' or op == 'p')
    and A[6] == 'f' and #KEYS == 1 and tonumber(A[9]) == 0 and tonumber(A[10]) == 0
    and now >= 0 and cost >= 0 and slack >= 0 and period >= 1 and limit >= 1 and x >= 0
    and now % 1 + cost % 1 + slack % 1 + period % 1 + limit % 1 + x % 1 == 0
    and now < 9007199254740992 and cost < 9007199254740992 and slack <= 86400000
    and period < 4503599627370496 and limit < 9007199254740992) then
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(A, ' '))
end
local window = (now - fmod(now, period)) / period
local count = 0
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'string' then
  local w, c = string.match(raw, '^(%d+) (%d+)$')
  w, c = tonumber(w), tonumber(c)
  -- A foreign value reads as no state; an earlier reading is decided in the
  -- stored window (no re-credit).
  if w and w < 9007199254740992 and c <= limit and w >= window then
    window, count = w, c
  elseif string.byte(raw, 1) == 33 then
    -- A control's marker (src/controls.rs), only read where a state is not.
    local kind = string.sub(raw, 2, 2)
    if kind == 'd' then return {0, 0, now, 0, 0, -1, -1} end
    if kind == 'a' then return {1, 0, now, 1, limit, 0, 0} end
    if kind == 'p' then
      local e = tonumber(string.sub(raw, 3))
      if e == nil then return {0, 0, now, 0, 0, -1, -1} end
      if e > now then
        local left = (e - now) * unit
        return {0, 0, now, 0, 0, left, left}
      end
    end
  end
end
local window_end = (window + 1) * period
local left = window_end - now
if left < 0 then left = 0 end
left = left * unit
if cost <= limit - count then
  local used = count + cost
  local reset = 0
  if used > 0 then reset = left end
  if op == 'c' and cost > 0 then
    local r = fmod(left, 1000000)
    local ttl = (left - r) / 1000000 + slack
    if r > 0 then ttl = ttl + 1 end
    redis.call('SET', KEYS[1], string.format('%d %d', window, used), 'PX', ttl)
    return {1, cost, now, 1, limit - used, 0, reset}
  end
  return {1, 0, now, 1, limit - used, 0, reset}
end
local retry = -1
if cost <= limit then retry = left end
local reset = 0
if count > 0 then reset = left end
return {0, 0, now, 0, limit - count, retry, reset}
