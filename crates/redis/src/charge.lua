-- tollgate: a budget's charge on GCRA limits (src/limiter/charge.rs): `cost`
-- permits recorded whether or not they fit, atomically over every limit of
-- one key, into debt. The state is decide.lua's GCRA state (the TAT in ticks
-- modulo M, see its gcra_module), so that checks and peeks of the same keys
-- read the debt; the debt is capped at M - 2·10^15 ticks, the most that state
-- reads back as a debt (a charge beyond it saturates there, never wraps to a
-- fresh bucket). A key holding a control's marker (a list, a penalty) is not
-- charged: a denied key is refused anyway, an allowed one is not counted.
-- ARGV: now ('' for TIME, else ns: the test mode), cost, slack (ms), then per
-- key `g scale interval capacity m` (decide.lua's contract). Reply: {1} the
-- charge fitted every limit, {0} it went over (recorded), {-1} a marker.
local function nat(x)
  return x and x >= 0 and x < 9007199254740992 and x % 1 == 0
end
local function invalid()
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(ARGV, ' '))
end
local now, unit
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  unit = 1000
else
  now = tonumber(ARGV[1])
  unit = 1
end
local cost, slack = tonumber(ARGV[2]), tonumber(ARGV[3])
if not (#KEYS >= 1 and #ARGV == 3 + 5 * #KEYS and nat(now) and nat(cost)
    and nat(slack) and slack <= 86400000) then
  return invalid()
end
local function fdiv(a, b)
  return (a - math.fmod(a, b)) / b
end
local function cdiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end

local limits = {}
for i = 1, #KEYS do
  local b = 3 + (i - 1) * 5
  local scale, interval = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local capacity, m = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  if not (ARGV[b + 1] == 'g' and nat(scale) and scale >= 1 and scale <= 16 and nat(interval)
      and interval >= 1 and nat(capacity) and capacity >= interval and nat(m) and m >= 1) then
    return invalid()
  end
  local us = unit * scale
  if m * us > 9000000000000000 or m * us + us <= 9000000000000000 then return invalid() end
  local p = {scale = scale, interval = interval, capacity = capacity, M = m * us}
  p.cur = math.fmod(now, m) * us
  p.debt = 0
  local raw = redis.pcall('GET', KEYS[i])
  if type(raw) ~= 'string' then raw = nil end
  local tat = tonumber(raw)
  if tat and tat >= 0 and tat < p.M and tat % 1 == 0 then
    local debt = tat - p.cur
    if debt < 0 then debt = debt + p.M end
    if debt <= p.M - 2000000000000000 then p.debt = debt end
  elseif raw and string.byte(raw, 1) == 33 then
    return {-1}
  end
  limits[i] = p
end

local fitted = 1
for i = 1, #KEYS do
  local p = limits[i]
  local most = p.M - 2000000000000000
  local debt
  -- debt + cost·interval, saturated at `most` without forming a product
  -- above 2^53.
  if cost > fdiv(most - p.debt, p.interval) then
    debt = most
    fitted = 0
  else
    debt = p.debt + cost * p.interval
    if debt > p.capacity then fitted = 0 end
  end
  if debt > 0 then
    local tat = debt - (p.M - p.cur)
    if tat < 0 then tat = tat + p.M end
    local ttl = cdiv(cdiv(debt, p.scale), 1000000) + slack
    redis.call('SET', KEYS[i], string.format('%d', tat), 'PX', string.format('%d', ttl))
  end
end
return {fitted}
