-- tollgate: one atomic decision over the limits of one key (see src/script.rs
-- for the contract), after src/prelude.lua (the arguments, the clock, every
-- limit's state in `limits` and `states`): check, peek, lease or refund.
-- Controls' markers decide before any limit and count nothing.
local mark, mark_end = marker()
if mark then
  if op == 'r' then return {1, 0, now} end
  local reply = {1, 0, now}
  if mark ~= 'a' then reply[1] = 0 end
  for i = 1, #KEYS do
    local p, at = limits[i], 3 + (i - 1) * 4
    if mark == 'a' then
      local full = p.capacity or p.limit
      reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = 1, full, 0, 0
    else
      local left = -1
      if mark == 'p' and mark_end ~= -1 then left = (mark_end - now) * unit * (p.scale or 1) end
      reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = 0, 0, left, left
    end
  end
  return reply
end

if op == 'r' then
  for i = 1, #KEYS do
    limits[i].alg.refund(KEYS[i], states[i], limits[i], cost, limits[i].x)
  end
  return {1, 0, now}
end

local take = cost
if op == 'l' then
  -- A lease takes as many as every limit has, up to `cost`; fewer than the
  -- request needs (ARGV[5]): the request itself is decided (and denied).
  for i = 1, #KEYS do
    take = math.min(take, limits[i].alg.avail(states[i], limits[i]))
  end
  if take < stamp then take = stamp end
end

local reply = {1, 0, now}
for i = 1, #KEYS do
  local allowed, headroom, retry, reset = limits[i].alg.decide(states[i], limits[i], take)
  if allowed == 0 then reply[1] = 0 end
  local at = 3 + (i - 1) * 4
  reply[at + 1] = allowed
  reply[at + 2] = headroom
  reply[at + 3] = retry
  reply[at + 4] = reset
end

if reply[1] == 0 then
  -- A denial takes nothing: every admitting limit reports its time back to
  -- full with nothing taken, as the core's AllOf does (a denying limit's
  -- is that already).
  for i = 1, #KEYS do
    local at = 3 + (i - 1) * 4
    if reply[at + 1] == 1 then
      local _, _, _, reset = limits[i].alg.decide(states[i], limits[i], 0)
      reply[at + 4] = reset
    end
  end
elseif op ~= 'p' then
  for i = 1, #KEYS do
    limits[i].alg.admit(KEYS[i], states[i], limits[i], take)
  end
  reply[2] = take
end
return reply
