-- tollgate: the operator's controls on one key, atomically over every limit of
-- the key (see src/controls.rs for the contract and the markers). Same
-- arguments as decide.lua; `op` is one of z (reset), n (refund `cost`
-- permits), k (penalty of `cost` clock units), d (deny list), a (allow list),
-- u (unlist), m (move the markers only: see below). Reply {changed, 0, now}.
-- Numbers are kept below 2^53 as in decide.lua.
--
-- A carrying limiter (src/carry.rs) passes the previous limits' keys after
-- the m keys of its limits (2m keys, same hash tag): a marker still under an
-- old key moves first, with its TTL, unless the new key holds one already
-- (a list or a penalty drops the key's state: it replaces a state there),
-- so that every control sees the key's lists and penalty; and a control that
-- drops the key's state (reset, penalty, listing, unlisting) drops the old
-- keys' too, or the next decision would carry it back.

local function nat(x)
  return x and x >= 0 and x < 9007199254740992 and x % 1 == 0
end
local function invalid()
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(ARGV, ' '))
end

local op = ARGV[1]
local now, unit
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  unit = 1000
else
  now = tonumber(ARGV[2])
  unit = 1
end
local cost = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
local m = (#ARGV - 5) / 6
if not ((op == 'z' or op == 'n' or op == 'k' or op == 'd' or op == 'a' or op == 'u'
      or op == 'm')
    and m >= 1 and m % 1 == 0 and (#KEYS == m or #KEYS == 2 * m) and nat(now) and nat(cost)
    and nat(slack) and slack <= 86400000 and nat(tonumber(ARGV[5]))) then
  return invalid()
end
if op == 'm' and #KEYS ~= 2 * m then return invalid() end

local function fdiv(a, b)
  return (a - math.fmod(a, b)) / b
end
local function cdiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end
local function int(x)
  return string.format('%d', x)
end
local function ttl_ms(ns)
  return int(cdiv(ns, 1000000) + slack)
end

local limits = {}
for i = 1, m do
  local b = 5 + (i - 1) * 6
  local p = {alg = ARGV[b + 1], a1 = tonumber(ARGV[b + 2]), a2 = tonumber(ARGV[b + 3]),
    a3 = tonumber(ARGV[b + 4]), a4 = tonumber(ARGV[b + 5])}
  -- 'w<cold factor>': warm-up (decide.lua's warm_module).
  p.cold = tonumber(string.match(p.alg, '^w([1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?)$'))
  if p.cold and (p.cold >= 4294967296 or not (nat(p.a3) and p.a3 >= 1 and nat(p.a4)
      and p.a4 >= 1)) then
    return invalid()
  end
  if not ((p.alg == 'g' or p.alg == 'f' or p.alg == 's' or p.alg == 'c' or p.cold) and nat(p.a1) and p.a1 >= 1
      and nat(p.a2) and p.a2 >= 1 and nat(p.a3) and nat(p.a4)) then
    return invalid()
  end
  if p.alg == 'g' and (p.a1 > 16 or p.a3 < p.a2 or p.a4 * unit * p.a1 > 9000000000000000) then
    return invalid()
  end
  limits[i] = p
end

local function is_mark(raw)
  return type(raw) == 'string' and string.byte(raw, 1) == 33
end

-- The previous limits' keys (a carrying limiter): markers move first.
local moved = 0
local function del_old()
  for i = m + 1, #KEYS do
    if KEYS[i] ~= KEYS[i - m] then redis.call('DEL', KEYS[i]) end
  end
end
for i = m + 1, #KEYS do
  local new, old = KEYS[i - m], KEYS[i]
  if new ~= old then
    local raw = redis.pcall('GET', old)
    if is_mark(raw) then
      if not is_mark(redis.pcall('GET', new)) then
        local pttl = redis.call('PTTL', old)
        if pttl > 0 then
          redis.call('SET', new, raw, 'PX', pttl)
        else
          redis.call('SET', new, raw)
        end
        moved = 1
      end
      redis.call('DEL', old)
    end
  end
end
if op == 'm' then return {moved, 0, now} end

-- The marker of every key ('d', 'a' or 'p' and the penalty's end, nil for
-- "never"), read once; the keys of one user key hold the same marker (the
-- controls write them together), the strongest one found counts.
local mark, mark_end = nil, nil
local raws = {}
for i = 1, m do
  local raw = redis.pcall('GET', KEYS[i])
  if type(raw) ~= 'string' then raw = nil end
  raws[i] = raw
  if raw and string.byte(raw, 1) == 33 then
    local kind = string.sub(raw, 2, 2)
    if kind == 'd' then
      mark = 'd'
    elseif kind == 'a' and mark ~= 'd' then
      mark = 'a'
    elseif kind == 'p' and mark == nil then
      local e = tonumber(string.sub(raw, 3))
      if e == nil or e > now then
        mark, mark_end = 'p', e
      end
    end
  end
end
local listed = mark == 'd' or mark == 'a'

-- Drops the key's state (and the previous limits' keys, if passed).
local function del_all()
  local n = 0
  for i = 1, #KEYS do
    if i <= m or KEYS[i] ~= KEYS[i - m] then n = n + redis.call('DEL', KEYS[i]) end
  end
  return n
end

if op == 'd' or op == 'a' then
  if mark == op then return {0, 0, now} end
  -- Listing drops the key's counted state and any penalty: no TTL, the list
  -- outlives every window.
  for i = 1, m do redis.call('SET', KEYS[i], '!' .. op) end
  del_old()
  return {1, 0, now}
end

if op == 'u' then
  if not listed then return {0, 0, now} end
  del_all()
  return {1, 0, now}
end

if op == 'z' then
  -- Back to full; a penalty is cancelled, a list is untouched.
  if listed then return {0, 0, now} end
  local n = del_all()
  if n > 0 then return {1, 0, now} end
  return {0, 0, now}
end

if op == 'k' then
  if listed or cost == 0 then return {0, 0, now} end
  local e = now + cost
  if mark == 'p' and (mark_end == nil or mark_end >= e) then return {0, 0, now} end
  if e >= 9007199254740992 then
    -- Past the clock's end: denied until "never", until reset.
    for i = 1, m do redis.call('SET', KEYS[i], '!pn') end
  else
    local ttl = ttl_ms(cost * unit)
    for i = 1, m do redis.call('SET', KEYS[i], '!p' .. int(e), 'PX', ttl) end
  end
  del_old()
  return {1, 0, now}
end

-- op == 'n': refund `cost` permits, never above full. Nothing to give back on
-- a listed key (nothing is counted) nor during a penalty (the state was
-- dropped when it was set).
if mark ~= nil or cost == 0 then return {0, 0, now} end
local changed = 0
for i = 1, m do
  local p, key, raw = limits[i], KEYS[i], raws[i]
  if p.alg == 'g' then
    -- As decide.lua's GCRA: the debt is (TAT - now) mod M; tat' = max(now, tat - n·T).
    local us = unit * p.a1
    local M = p.a4 * us
    local cur = math.fmod(now, p.a4) * us
    local tat = tonumber(raw)
    if tat and tat >= 0 and tat < M and tat % 1 == 0 then
      local debt = tat - cur
      if debt < 0 then debt = debt + M end
      if debt > M - 2000000000000000 then debt = 0 end
      if debt > 0 then
        local left = debt - math.min(debt, cost * p.a2)
        changed = 1
        if left <= 0 then
          redis.call('DEL', key)
        else
          local t = left - (M - cur)
          if t < 0 then t = t + M end
          redis.call('SET', key, int(t), 'PX', ttl_ms(cdiv(left, p.a1)))
        end
      end
    end
  elseif p.alg == 'f' or p.alg == 'c' then
    -- The current window's count - n, floored at 0 (an earlier reading is
    -- decided in the stored window, as in decide.lua). A calendar window's
    -- stored window is taken as current: a stale one (within the TTL's
    -- slack after its end) is read as no state by decisions anyway.
    local window = 0
    if p.alg == 'f' then window = fdiv(now, p.a1) end
    local w, c
    if raw then w, c = string.match(raw, '^(%d+) (%d+)$') end
    w, c = tonumber(w), tonumber(c)
    if w and w < 9007199254740992 and c <= p.a2 and w >= window and c > 0 then
      changed = 1
      local left = c - math.min(c, cost)
      if left == 0 then
        redis.call('DEL', key)
      elseif p.alg == 'f' then
        local window_end = (w + 1) * p.a1
        local ns = (window_end - math.min(now, window_end)) * unit
        redis.call('SET', key, int(w) .. ' ' .. int(left), 'PX', ttl_ms(ns))
      else
        -- The same window: its TTL stays (PTTL, not KEEPTTL: Redis 5).
        local pttl = redis.call('PTTL', key)
        if pttl > 0 then
          redis.call('SET', key, int(w) .. ' ' .. int(left), 'PX', pttl)
        else
          redis.call('SET', key, int(w) .. ' ' .. int(left))
        end
      end
    end
  elseif p.cold then
    -- Warm-up (WarmUp::refund, warm_math.lua): what is owed moves back, the
    -- permits go back to the idle store. A value that is not a state is
    -- left alone.
    local N = bignum()
    local k = warm_constants(N, p.a1, p.a2, p.a3, p.a4, p.cold)
    local W = warm_math(N, k)
    local f, s = W.parse(raw)
    if f then
      local now_ns = N.mul(N.small(now), N.small(unit))
      f, s = W.refund(f, s, now_ns, N.small(cost))
      if f then
        changed = 1
        local ttl = N.ceil_div(N.sub(W.cold_at(f, s), now_ns), {1000000})
        redis.call('SET', key, W.format(f, s), 'PX', N.str(N.add(ttl, N.small(slack))))
      end
    end
  else
    -- Sliding window counter: the current slot first, then older ones, while
    -- they are in the window. A state that is not this limit's is left alone.
    local period, n, limit = p.a1, p.a2, p.a3
    local h = redis.pcall('HGETALL', key)
    if type(h) == 'table' and not h.err and #h > 0 then
      local head, total, counts, ok = nil, nil, {}, true
      for j = 1, #h, 2 do
        local f, v = h[j], tonumber(h[j + 1])
        if not nat(v) then ok = false; break end
        if f == 'h' then head = v
        elseif f == 't' then total = v
        else
          local index = tonumber(f)
          if not (nat(index) and index < n and v <= limit) then ok = false; break end
          counts[index] = v
        end
      end
      local sum = 0
      for _, v in pairs(counts) do sum = sum + v end
      if ok and head and total and sum == total and total <= limit then
        local q = fdiv(now, period)
        local epoch = q * n + fdiv((now - q * period) * n, period)
        local current = math.max(epoch, head)
        local back, touched = cost, false
        local oldest = math.max(current - n + 1, 0)
        local e = head
        while back > 0 and e >= oldest do
          local j = math.fmod(e, n)
          local v = counts[j] or 0
          if v > 0 then
            local take = math.min(v, back)
            back = back - take
            total = total - take
            touched = true
            if v - take == 0 then
              redis.call('HDEL', key, int(j))
            else
              redis.call('HSET', key, int(j), int(v - take))
            end
          end
          e = e - 1
        end
        if touched then
          changed = 1
          if total == 0 then
            redis.call('DEL', key)
          else
            redis.call('HSET', key, 't', int(total))
          end
        end
      end
    end
  end
end
return {changed, 0, now}
