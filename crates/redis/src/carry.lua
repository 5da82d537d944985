-- tollgate: carry a key's state across a change of its limits (src/carry.rs).
-- This prelude runs before decide.lua's body, in the same script: KEYS holds
-- the m new keys then the m old ones (same hash tag), ARGV decide.lua's
-- arguments then, per limit, `alg a1 a2 a3 a4 rule` of the old limit (rule:
-- k keep, p proportional, - none). Where a new key is absent and the old one
-- holds a state, the state is converted, written under the new key and the
-- old key deleted; then the extra keys and arguments are dropped and
-- decide.lua decides as usual, all in one atomic call.
do
  local m = #KEYS / 2
  local base = 5 + 6 * m
  local function bad()
    return m < 1 or m % 1 ~= 0 or #ARGV ~= base + 6 * m
  end
  if bad() then
    return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(ARGV, ' '))
  end
  local now, unit
  if ARGV[2] == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    unit = 1000
  else
    now = tonumber(ARGV[2])
    unit = 1
  end
  local slack = tonumber(ARGV[4])
  local function ok(x)
    return x and x >= 0 and x < 9007199254740992 and x % 1 == 0
  end
  if not (ok(now) and ok(slack)) then
    return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(ARGV, ' '))
  end
  local function fmod_div(a, b) return (a - math.fmod(a, b)) / b end
  local function ceil_div(a, b)
    local r = math.fmod(a, b)
    local q = (a - r) / b
    if r > 0 then q = q + 1 end
    return q
  end
  -- ceil(a·b/c) for a < 2^53, b, c < 2^53: exact while a·b < 2^53, else
  -- within one unit (doubles), rounded up.
  local function scale(a, b, c)
    local q, r = fmod_div(a, c), math.fmod(a, c)
    return q * b + math.ceil(r * b / c)
  end
  for i = 1, m do
    local n = 5 + (i - 1) * 6
    local o = base + (i - 1) * 6
    local alg, rule = ARGV[o + 1], ARGV[o + 6]
    local new, old = KEYS[i], KEYS[m + i]
    local p1, p2, p3, p4 = tonumber(ARGV[n + 2]), tonumber(ARGV[n + 3]), tonumber(ARGV[n + 4]), tonumber(ARGV[n + 5])
    local o1, o2, o3, o4 = tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5])
    local raw = nil
    if redis.call('EXISTS', new) == 0 then raw = redis.pcall('GET', old) end
    if type(raw) == 'string' and string.byte(raw, 1) == 33 then
      -- A control's marker (a list, a penalty) moves whatever the rule, with
      -- its TTL (src/controls.rs).
      local pttl = redis.call('PTTL', old)
      if pttl > 0 then
        redis.call('SET', new, raw, 'PX', pttl)
      else
        redis.call('SET', new, raw)
      end
      redis.call('DEL', old)
    elseif (rule == 'k' or rule == 'p') and alg == ARGV[n + 1] and ok(p1) and ok(p2) and ok(p3)
        and ok(p4) and ok(o1) and ok(o2) and ok(o3) and ok(o4) and p1 >= 1 and p2 >= 1
        and o1 >= 1 and o2 >= 1 then
      if type(raw) == 'string' then
        if alg == 'g' and o4 >= 1 and p4 >= 1 then
          -- GCRA: the old debt (ticks of the old scale), in permits, in the
          -- new quota's ticks; Keep by interval, Proportional by capacity.
          local us_old, us_new = unit * o1, unit * p1
          local M_old, M_new = o4 * us_old, p4 * us_new
          local tat = tonumber(raw)
          if tat and tat >= 0 and tat < M_old and tat % 1 == 0 then
            local debt = tat - math.fmod(now, o4) * us_old
            if debt < 0 then debt = debt + M_old end
            if debt > M_old - 2000000000000000 then debt = 0 end
            if debt > 0 then
              if rule == 'k' then debt = scale(debt, p2, o2) else debt = scale(debt, p3, o3) end
              -- A debt the state cannot hold exactly is capped (see carry.rs).
              if debt > 2000000000000000 then debt = 2000000000000000 end
              local cur = math.fmod(now, p4) * us_new
              local t = debt - (M_new - cur)
              if t < 0 then t = t + M_new end
              redis.call('SET', new, string.format('%d', t), 'PX',
                string.format('%d', ceil_div(ceil_div(debt, p1), 1000000) + slack))
            end
            redis.call('DEL', old)
          end
        elseif alg == 'f' then
          -- Fixed window: the count if its window is current under the old
          -- period, in the window current under the new one; past the new
          -- limit it is a debt carried into the next windows, as the core's
          -- Keep does, up to the debt cap (DEBT_PERIODS + 1 = 17 limits,
          -- prelude.lua), and the key lives until it has drained.
          local w, c = string.match(raw, '^(%d+) (%d+)$')
          w, c = tonumber(w), tonumber(c)
          if w and c and w >= fmod_div(now, o1) then
            local used = c
            if rule == 'p' then used = scale(c, p2, o2) end
            if used > 17 * p2 then used = 17 * p2 end
            if used > 0 then
              local window = fmod_div(now, p1)
              local left = ((window + ceil_div(used, p2)) * p1 - now) * unit
              redis.call('SET', new, string.format('%d %d', window, used), 'PX',
                string.format('%d', ceil_div(left, 1000000) + slack))
            end
            redis.call('DEL', old)
          end
        end
      end
    end
  end
  for i = 2 * m, m + 1, -1 do KEYS[i] = nil end
  for i = #ARGV, base + 1, -1 do ARGV[i] = nil end
end
