-- tollgate: the warm-up transition (the core's algorithm::warm_up, Guava's
-- SmoothWarmingUp) in exact integers (src/bignum.lua), for the scripts that
-- run warm-up limits: src/warm_up.lua (one limit), src/decide.lua (a limit
-- among others) and src/controls.lua (the refund). Prepended after
-- bignum.lua; nothing is built unless a script calls it.
--
-- The state is (F, S): F the instant (ns) the next request may go, S the
-- idle permits at F in the limit's units (see the core's "Exactness").

-- The integer constants (WarmUp::constants) of a limit given by its burst,
-- `l / t` permits per ns in lowest terms, its warm-up period `p` (ns) and its
-- cold factor: Lua integers, every one below 2^53 (the cold factor below
-- 2^32).
local function warm_constants(N, burst, l, t, p, cold)
  local k = {burst = N.small(burst), l = N.small(l), t = N.small(t)}
  local pl = N.mul(N.small(p), k.l)
  k.permit = N.mul(N.small(2 * (cold + 1)), k.t)
  k.threshold = N.mul(pl, N.small(cold + 1))
  k.max = N.mul(pl, N.small(cold + 5))
  k.gain = N.mul(k.l, N.small(cold + 5))
  k.slope = N.small(cold - 1)
  k.per_remainder = N.mul(N.small(16), k.threshold)
  k.denominator = N.mul(k.per_remainder, k.l)
  return k
end

-- The transition's steps over the constants `k`.
local function warm_math(N, k)
  local W = {}
  local zero = {0}

  -- When a state is as cold as a fresh one: F plus the time to regain what
  -- its idle permits lack.
  function W.cold_at(f, s)
    return N.add(f, N.ceil_div(N.sub(k.max, s), k.gain))
  end

  -- Idle permits at `now`: those at F, plus `gain` a nanosecond since.
  function W.idle(f, s, now)
    if N.cmp(now, f) <= 0 then return s end
    return N.min(k.max, N.add(s, N.mul(N.sub(now, f), k.gain)))
  end

  -- The cost in ns of `n` permits taken at `s` units, rounded up.
  function W.cost(s, n)
    local taken = N.min(N.mul(n, k.permit), s)
    local ramp = zero
    if N.cmp(s, k.threshold) > 0 then ramp = N.sub(s, k.threshold) end
    local a = N.min(taken, ramp)
    local whole, rest = N.divmod(N.mul(n, k.t), k.l)
    local area = N.mul(N.mul(k.slope, a), N.sub(N.add(ramp, ramp), a))
    return N.add(whole, N.ceil_div(N.add(N.mul(rest, k.per_remainder), area), k.denominator))
  end

  -- The idle permits left after `n` are taken from `s`.
  function W.take(s, n)
    return N.sub(s, N.min(N.mul(n, k.permit), s))
  end

  -- The refund of `n` permits at `now` (WarmUp::refund): what is owed moves
  -- back `n` stable intervals (rounded down), not before `now`, and the
  -- permits go back to the idle store (not above `max`). nil when nothing is
  -- owed.
  function W.refund(f, s, now, n)
    if N.cmp(f, now) <= 0 or N.cmp(n, zero) == 0 then return nil end
    local back = N.divmod(N.mul(n, k.t), k.l)
    local f2 = now
    if N.cmp(f, N.add(now, back)) > 0 then f2 = N.sub(f, back) end
    return f2, N.min(k.max, N.add(s, N.mul(n, k.permit)))
  end

  -- A stored state "F S" as (F, S), S at most `max`; nil for anything else.
  function W.parse(raw)
    if type(raw) ~= 'string' then return nil end
    local f, s = string.match(raw, '^(%d+) (%d+)$')
    if not f or #f > 20 or #s > 20 then return nil end
    return N.big(f), N.min(N.big(s), k.max)
  end

  function W.format(f, s)
    return N.str(f) .. ' ' .. N.str(s)
  end

  return W
end
