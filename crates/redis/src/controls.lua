-- tollgate: the operator's controls on one key, atomically over every limit of
-- the key (see src/controls.rs for the contract and the markers), after
-- src/prelude.lua (the arguments, the clock, every limit's state, read as a
-- decision reads it). Same arguments as decide.lua; `op` is one of z
-- (reset), n (refund `cost` permits), k (penalty of `cost` clock units), d
-- (deny list), a (allow list), u (unlist), m (move the markers only: see
-- below). Reply {changed, 0, now}.
--
-- A listed key's state or penalty is held aside at `<key>!held` until it
-- is unlisted (see below), as the core keeps a listed key's cell.
--
-- A carrying limiter (src/carry.rs) passes the previous limits' keys and
-- arguments after those of its limits (2m keys, same hash tag), as for a
-- carrying decision: a marker still under an old key moves first, with
-- its TTL, unless the new key holds one already (prelude.lua's
-- move_marker: what a list held aside under the old key goes back to it,
-- to be carried once unlisted), so that every control sees the key's
-- lists and penalty; and a control that drops the key's state (reset, a
-- penalty) drops the old keys' too, or the next decision would carry it
-- back.

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
    if states[i].mark then
      move_marker(new, old, nil)
    else
      move_marker(new, old, mark)
      -- Read as the new key's marker from here on.
      states[i] = {mark = mark}
      moved = 1
    end
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

-- A listed key's state (a debt included) or penalty is held aside, with
-- its TTL, at `<key>!held` (the same hash tag: the same slot), as the
-- core keeps a listed key's cell and penalty: unlisting puts it back.
local function held(i)
  return KEYS[i] .. '!held'
end

-- The end of the penalty `raw` holds (-1: never), or nil if none in force.
local function penalty_end(raw)
  if type(raw) ~= 'string' or string.sub(raw, 1, 2) ~= '!p' then return nil end
  local e = tonumber(string.sub(raw, 3))
  if e == nil then return -1 end
  if e > now then return e end
  return nil
end

-- Sets a penalty ending `cost` clock units from now at `key`.
local function penalize(key)
  local e = now + cost
  if e >= 9007199254740992 then
    -- Past the clock's end: denied until "never", until reset.
    redis.call('SET', key, '!pn')
  else
    redis.call('SET', key, '!p' .. int(e), 'PX', ttl_ms(cost * unit))
  end
end

if op == 'd' or op == 'a' then
  if mark == op then return {0, 0, now} end
  -- No TTL: the list outlives every window. A key listed already keeps
  -- what it holds aside.
  for i = 1, m do
    if not listed then
      if redis.call('EXISTS', KEYS[i]) == 1 then
        redis.call('RENAME', KEYS[i], held(i))
      else
        redis.call('DEL', held(i))
      end
    end
    redis.call('SET', KEYS[i], '!' .. op)
  end
  -- The previous limits' keys stay: a state not yet carried is carried
  -- once the key is unlisted, as the core's cell stays.
  return {1, 0, now}
end

if op == 'u' then
  if not listed then return {0, 0, now} end
  for i = 1, m do
    redis.call('DEL', KEYS[i])
    if redis.call('EXISTS', held(i)) == 1 then redis.call('RENAME', held(i), KEYS[i]) end
  end
  return {1, 0, now}
end

if op == 'z' then
  -- Back to full, a debt included; a penalty is cancelled, a list is
  -- untouched (what it holds aside is dropped: unlisted, the key is full).
  if listed then
    local n = del_old()
    for i = 1, m do n = n + redis.call('DEL', held(i)) end
    if n > 0 then return {1, 0, now} end
    return {0, 0, now}
  end
  if del_all() > 0 then return {1, 0, now} end
  return {0, 0, now}
end

if op == 'k' then
  -- A penalty set or extended drops the key's state, a debt included, as
  -- the core's reset of the cell does; on a listed key it is held aside
  -- (in force once unlisted, if not over).
  if cost == 0 then return {0, 0, now} end
  local e = now + cost
  if listed then
    local changed = 0
    for i = 1, m do
      local was = penalty_end(redis.pcall('GET', held(i)))
      if not (was and (was == -1 or was >= e)) then
        penalize(held(i))
        changed = 1
      end
    end
    if changed == 1 then del_old() end
    return {changed, 0, now}
  end
  if mark == 'p' and (mark_end == -1 or mark_end >= e) then return {0, 0, now} end
  for i = 1, m do penalize(KEYS[i]) end
  del_old()
  return {1, 0, now}
end

-- op == 'n': refund `cost` permits by each algorithm's rule (the core's
-- refund_cell), a state in debt included, never above full; on a listed
-- key, into the state it holds aside. Nothing to give back during a
-- penalty (the state was dropped when it was set).
if mark == 'p' or cost == 0 then return {0, 0, now} end
local changed = 0
for i = 1, m do
  local p, key, st = limits[i], KEYS[i], states[i]
  if listed then
    key = held(i)
    st = p.alg.load(key, p)
  end
  if not st.mark and p.alg.give(key, st, p, cost) then changed = 1 end
end
return {changed, 0, now}
