-- tollgate: one atomic decision over the limits of one key (see src/script.rs
-- for the contract), after src/prelude.lua (the arguments, the clock, every
-- limit's state in `limits` and `states`): check, peek, lease or refund.
-- Controls' markers decide before any limit and count nothing (an
-- allow-listed key reports a look of `cost` at the state held aside).
local mark, mark_end = marker()
if mark then
  if op == 'r' then return {1, 0, now} end
  return marked_reply(mark, mark_end, cost)
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

local reply = verdicts(take)
if reply[1] == 1 and op ~= 'p' then
  for i = 1, #KEYS do
    limits[i].alg.admit(KEYS[i], states[i], limits[i], take)
  end
  reply[2] = take
end
return reply
