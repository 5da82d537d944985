-- tollgate: the operator's controls on one key, atomically over every limit of
-- the key (see src/controls.rs for the contract and the markers), after
-- src/prelude.lua (the arguments, the clock, every limit's state, read as a
-- decision reads it). Same arguments as decide.lua; `op` is one of z
-- (reset), n (refund `cost` permits), k (penalty of `cost` clock units), d
-- (deny list), a (allow list), u (unlist), m (move the markers only: see
-- below). Reply {changed, 0, now}.
--
-- A carrying limiter (src/carry.rs) passes the previous limits' keys and
-- arguments after those of its limits (2m keys, same hash tag), as for a
-- carrying decision: a marker still under an old key moves first, with
-- its TTL, unless the new key holds one already (a list or a penalty
-- drops the key's state: it replaces a state there), so that every
-- control sees the key's lists and penalty; and a control that drops the
-- key's state (reset, penalty, listing, unlisting) drops the old keys'
-- too, or the next decision would carry it back.

-- `stamp` (unused by a control) is 1 when the previous limits' keys are
-- passed: the first half of KEYS is the key's, the second the old keys.
local m = #KEYS
local olds = {}
if stamp == 1 then
  if #KEYS % 2 ~= 0 then return invalid() end
  m = #KEYS / 2
  for i = 1, m do olds[i] = KEYS[m + i] end
elseif stamp ~= 0 or op == 'm' then
  return invalid()
end

-- The previous limits' keys (a carrying limiter): markers move first.
local moved = 0
for i = 1, #olds do
  local new, old = KEYS[i], olds[i]
  local mark = states[m + i].mark
  if new ~= old and mark then
    if not states[i].mark then
      local pttl = redis.call('PTTL', old)
      if pttl > 0 then
        redis.call('SET', new, mark, 'PX', pttl)
      else
        redis.call('SET', new, mark)
      end
      -- Read as the new key's marker from here on.
      states[i] = {mark = mark}
      moved = 1
    end
    redis.call('DEL', old)
  end
end
if op == 'm' then return {moved, 0, now} end
for i = #KEYS, m + 1, -1 do
  KEYS[i] = nil
  limits[i] = nil
  states[i] = nil
end

-- Drops the previous limits' keys.
local function del_old()
  local n = 0
  for i = 1, #olds do
    if olds[i] ~= KEYS[i] then n = n + redis.call('DEL', olds[i]) end
  end
  return n
end

-- Drops the key's state (and the previous limits' keys, if passed).
local function del_all()
  local n = del_old()
  for i = 1, m do n = n + redis.call('DEL', KEYS[i]) end
  return n
end

-- The key's marker (prelude.lua: a deny list over an allow list over a
-- penalty in force, its end -1 for "never"); the keys of one user key hold
-- the same marker (the controls write them together).
local mark, mark_end = marker()
local listed = mark == 'd' or mark == 'a'

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
  -- Back to full, a debt included; a penalty is cancelled, a list is
  -- untouched.
  if listed then return {0, 0, now} end
  if del_all() > 0 then return {1, 0, now} end
  return {0, 0, now}
end

if op == 'k' then
  -- A penalty drops the key's state, a debt included, as the core's reset
  -- of the cell does when a penalty is set or extended.
  if listed or cost == 0 then return {0, 0, now} end
  local e = now + cost
  if mark == 'p' and (mark_end == -1 or mark_end >= e) then return {0, 0, now} end
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

-- op == 'n': refund `cost` permits by each algorithm's rule (the core's
-- refund_cell), a state in debt included, never above full. Nothing to
-- give back on a listed key (nothing is counted) nor during a penalty (the
-- state was dropped when it was set).
if mark ~= nil or cost == 0 then return {0, 0, now} end
local changed = 0
for i = 1, m do
  if limits[i].alg.give(KEYS[i], states[i], limits[i], cost) then changed = 1 end
end
return {changed, 0, now}
