-- tollgate: carry a key's state across a change of its limits (src/carry.rs),
-- between src/prelude.lua and decide.lua's body, in the same script. KEYS
-- holds the m new keys then the m old ones (same hash tag); ARGV is
-- decide.lua's for 2m limits: the new limits, then the old ones, each old
-- limit's `x` the rule (0 none, 1 Keep, 2 Proportional). The prelude has
-- validated them all and loaded every state, the old ones under the old
-- limits. Where a new key is absent and its old key differs: a control's
-- marker moves with its TTL whatever the rule; a state is converted by the
-- core's carry_cell for the pair (each module's `carry`: GCRA, fixed and
-- calendar windows, sliding window, warm-up) or, across algorithms, by the
-- core's AnyAlgorithm rule (the permits counted under the old limit,
-- charged into a fresh state of the new one: a warm-up's `reserve`); the
-- old key is deleted. Then
-- the old keys, limits and states are dropped and decide.lua decides as
-- usual, all in one atomic call. Never afresh but by the rule.
do
  local m = #KEYS / 2
  if m < 1 or m % 1 ~= 0 then return invalid() end
  -- The most a charge may leave in a state, per algorithm: what it holds
  -- (the core's cap is at most that: the carry keeps more, never less).
  local function most(p)
    if p.alg == G then return p.M - 2000000000000000 end
    return (DEBT_PERIODS + 1) * p.size
  end
  for i = 1, m do
    local new, old = KEYS[i], KEYS[m + i]
    local p, q, rule = limits[i], limits[m + i], limits[m + i].x
    if rule > 2 then return invalid() end
    if new ~= old and redis.call('EXISTS', new) == 0 then
      local mark = states[m + i].mark
      if mark then
        move_marker(new, old, mark)
      elseif rule > 0 and p.kind == q.kind then
        p.alg.carry(new, states[i], p, states[m + i], q, rule)
      elseif rule > 0 then
        local counted = q.size - q.alg.avail(states[m + i], q)
        if rule == 2 then counted = scale(counted, p.size, q.size) end
        if counted > 0 then
          if p.alg.charge then
            p.alg.charge(new, states[i], p, counted, most(p))
          else
            p.alg.reserve(new, states[i], p, counted)
          end
        end
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
