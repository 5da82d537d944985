-- tollgate: carry a key's state across a change of its limits (src/carry.rs),
-- between src/prelude.lua and decide.lua's body, in the same script. KEYS
-- holds the m new keys then the m old ones (same hash tag); ARGV is
-- decide.lua's for 2m limits: the new limits, then the old ones, each old
-- limit's `x` being 3 · k + the rule (rule 0 none, 1 Keep, 2 Proportional;
-- k the debt the new limit's state may owe, in permits beyond full). The
-- prelude has validated them all and loaded every state, the old ones
-- under the old limits. Where a new key is absent and its old key differs:
-- a control's marker moves with its TTL whatever the rule; a state is
-- converted by the core's carry_cell for the pair (each module's `carry`:
-- GCRA, fixed and calendar windows, sliding window, warm-up) or, across
-- algorithms, by the core's AnyAlgorithm rule (the permits counted under
-- the old limit, charged into a fresh state of the new one); the old key
-- is deleted. Then the old keys, limits and states are dropped and
-- decide.lua decides as usual, all in one atomic call. Never afresh but by
-- the rule.
--
-- The debt cap (the core's algorithm docs, "Charges, debt and its cap"):
-- one rule wherever a debt comes from. A carried state owes at most
-- DEBT_PERIODS periods of the new quota beyond full, as after the largest
-- charge: k is DEBT_PERIODS · limit (a window's count within the core's
-- count field), so a limit lowered more than (DEBT_PERIODS + 1)-fold keeps
-- what fits under the cap and gives the rest back, as the core does.
do
  local m = #KEYS / 2
  if m < 1 or m % 1 ~= 0 then return invalid() end
  for i = 1, m do
    local new, old = KEYS[i], KEYS[m + i]
    local p, q = limits[i], limits[m + i]
    local rule = math.fmod(q.x, 3)
    local k = (q.x - rule) / 3
    if new ~= old and redis.call('EXISTS', new) == 0 then
      local mark = states[m + i].mark
      if mark then
        move_marker(new, old, mark)
      elseif rule > 0 and p.kind == q.kind then
        p.alg.carry(new, states[i], p, states[m + i], q, rule, k)
      elseif rule > 0 then
        local counted = q.size - q.alg.avail(states[m + i], q)
        if rule == 2 then counted = scale(counted, p.size, q.size) end
        -- A warm-up is not a budget's to charge: its capped reserve.
        local charge = p.alg.charge or p.alg.reserve
        if counted > 0 then charge(new, states[i], p, counted, p.alg.cap(p, k)) end
      end
      if not mark then redis.call('DEL', old) end
      states[i] = p.alg.load(new, p)
    end
  end
  for i = 2 * m, m + 1, -1 do
    KEYS[i] = nil
    limits[i] = nil
    states[i] = nil
  end
end
