-- tollgate: the prelude of the scripts that read limits' states (decide.lua,
-- charge.lua, carry.lua, controls.lua; see src/script.rs for the contract
-- and the stored formats). It validates the arguments (`op` among `OPS`,
-- the script's own operations, which src/script.rs puts before this
-- file), reads the clock, and loads every limit's state into `limits` and
-- `states`, through one module per algorithm (its load, decision,
-- admission, refund, charge, a control's refund and carry); the script
-- after it answers the op.
-- Every number is an integer below 2^53, kept exact in Lua's doubles:
-- divisions go through math.fmod (exact), numbers are written with
-- string.format('%d') (tostring would round to 14 digits). Every argument
-- is validated before any key is touched; a value at a key that is not a
-- state of its limit (another type, garbage, a count past the debt cap)
-- reads as no state and is overwritten by the next write (src/script.rs,
-- "Stored formats").

local function nat(x)
  return x and x >= 0 and x < 9007199254740992 and x % 1 == 0
end
local function invalid()
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(ARGV, ' '))
end

local op = ARGV[1]
local now, unit
if ARGV[2] == '' then
  -- The server's clock, in microseconds since the Unix epoch (< 2^53 until 2255).
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  unit = 1000
else
  -- Test mode: the caller's clock, in nanoseconds.
  now = tonumber(ARGV[2])
  unit = 1
end
local cost = tonumber(ARGV[3])
local slack = tonumber(ARGV[4])
-- A refund's lease time (clock units); a lease's need (permits).
local stamp = tonumber(ARGV[5])
if not (type(op) == 'string' and #op == 1 and string.find(OPS, op, 1, true) and #KEYS >= 1
    and #ARGV == 5 + 6 * #KEYS and nat(now) and nat(cost) and nat(slack)
    and slack <= 86400000 and nat(stamp)) then
  return invalid()
end

-- How many periods of its quota a state may owe beyond full: the core's
-- tollgate::algorithm::DEBT_PERIODS (a unit test in src/script.rs keeps
-- them equal). A window's count up to (DEBT_PERIODS + 1) · limit is a
-- state (a charge's debt); beyond, it is foreign.
local DEBT_PERIODS = 16

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

-- ceil(a·b/c), for a carry's rescaling: exact while the products stay
-- below 2^53, else within a unit (doubles), rounded up.
local function scale(a, b, c)
  local q, r = fdiv(a, c), math.fmod(a, c)
  return q * b + math.ceil(r * b / c)
end

-- Milliseconds for PEXPIRE: the time to full refill (ns), rounded up, plus slack.
local function ttl_ms(ns)
  return int(cdiv(ns, 1000000) + slack)
end

-- A string value at `key`, or nil if there is none or another type is there.
local function get(key)
  local raw = redis.pcall('GET', key)
  if type(raw) == 'string' then return raw end
  return nil
end

---------------------------------------------------------------------------
-- GCRA. State: the TAT in ticks (1/scale ns) modulo M = m·unit·scale, as a
-- plain integer (m: clock units, the largest with M <= 9·10^15). The debt is
-- (TAT - now) mod M, read as 0 (a TAT in the past) above M - 2·10^15.
local function gcra_module()
  local G = {}

  function G.load(key, p)
    local st = {debt = 0}
    local us = unit * p.scale
    p.M = p.m * us
    st.cur = math.fmod(now, p.m) * us
    local raw = get(key)
    local tat = tonumber(raw)
    if tat and tat >= 0 and tat < p.M and tat % 1 == 0 then
      local debt = tat - st.cur
      if debt < 0 then debt = debt + p.M end
      if debt <= p.M - 2000000000000000 then st.debt = debt end
    elseif raw and string.byte(raw, 1) == 33 then
      st.mark = raw
    end
    return st
  end

  function G.avail(st, p)
    if st.debt >= p.capacity then return 0 end
    return fdiv(p.capacity - st.debt, p.interval)
  end

  function G.decide(st, p, c)
    local wanted = st.debt + c * p.interval
    if wanted <= p.capacity then
      return 1, p.capacity - wanted, 0, wanted
    end
    local retry = -1
    if c * p.interval <= p.capacity then retry = wanted - p.capacity end
    local headroom = 0
    if st.debt < p.capacity then headroom = p.capacity - st.debt end
    return 0, headroom, retry, st.debt
  end

  local function gcra_store(key, st, p, debt)
    if debt <= 0 then
      redis.call('DEL', key)
    else
      -- (cur + debt) mod M, without forming a sum above 2^53.
      local tat = debt - (p.M - st.cur)
      if tat < 0 then tat = tat + p.M end
      redis.call('SET', key, int(tat), 'PX', ttl_ms(cdiv(debt, p.scale)))
    end
  end

  function G.admit(key, st, p, c)
    if c > 0 then gcra_store(key, st, p, st.debt + c * p.interval) end
  end

  -- Gives back `r` permits of a lease whose debt ran `x` ticks ahead of `stamp`:
  -- only the part of the lease still ahead of now, never more than the debt, so
  -- that the bucket is never fuller than had the lease been smaller.
  function G.refund(key, st, p, r, x)
    local ahead = x - (now - stamp) * unit * p.scale
    local back = math.min(r * p.interval, ahead, st.debt)
    if back > 0 then gcra_store(key, st, p, st.debt - back) end
  end

  -- A control's refund of `n` permits (controls.lua, the core's
  -- Gcra::refund): TAT := max(now, TAT - n·T), a debt past the burst
  -- included. Returns whether the state changed.
  function G.give(key, st, p, n)
    if st.debt == 0 or n == 0 then return false end
    gcra_store(key, st, p, st.debt - math.min(st.debt, n * p.interval))
    return true
  end

  -- A charge (charge.lua): `c` permits recorded whether or not they fit,
  -- whole permits while the debt stays within `cap` ticks (the core's
  -- capacity + DEBT_PERIODS · limit · interval, sent by the client) and
  -- within what the state reads back (M - 2·10^15). Returns the permits
  -- recorded and whether the debt after is within the capacity.
  function G.charge(key, st, p, c, cap)
    local most = math.min(cap, p.M - 2000000000000000)
    local room = 0
    if most > st.debt then room = fdiv(most - st.debt, p.interval) end
    local recorded = math.min(c, room)
    local debt = st.debt + recorded * p.interval
    if recorded > 0 then gcra_store(key, st, p, debt) end
    return recorded, debt <= p.capacity
  end

  -- The most ticks of debt a state may hold with `k` permits owed beyond
  -- the burst (the core's Gcra::debt_cap for k = DEBT_PERIODS · limit): a
  -- charge's cap in a carry (carry.lua). A product past 2^53 is past what
  -- the state reads back, which G.charge and G.carry cap it at.
  function G.cap(p, k)
    return p.capacity + k * p.interval
  end

  -- A carry (carry.lua, the core's Gcra::carry_cell): the debt `old` owed
  -- under limit `q`, in permits, in this limit's ticks (Keep by interval,
  -- Proportional by capacity, rounded up), not capped at the burst; only
  -- at the debt cap, G.cap(p, k), and at what the state reads back (M -
  -- 2·10^15 ticks). `st`: the new key's (empty) state.
  function G.carry(key, st, p, old, q, rule, k)
    if old.debt == 0 then return end
    local debt
    if rule == 1 then
      debt = scale(old.debt, p.interval, q.interval)
    else
      debt = scale(old.debt, p.capacity, q.capacity)
    end
    gcra_store(key, st, p, math.min(debt, G.cap(p, k), p.M - 2000000000000000))
  end
  return G
end

---------------------------------------------------------------------------
-- Fixed window. State "window count"; `period` in clock units. A count past
-- the limit is a charge's debt (the core's FixedWindow): a window that ends
-- with limit + D starts the next with D, the one after with D - limit, ...
-- floored at 0; a count above (DEBT_PERIODS + 1) · limit is foreign.
local function fixed_module()
  local F = {}

  -- Calendar windows (src/calendar.rs): the window index of time `t` and
  -- the start of window `i`, in clock units of Unix time.
  local function cal_index(t, p)
    if p.cal == 4 then return fdiv(t + 3 * p.day, 7 * p.day) end
    if p.cal ~= 5 then return fdiv(t, p.period) end
    -- civil_from_days (H. Hinnant), days since 1970-01-01 >= 0.
    local z = fdiv(t, p.day) + 719468
    local era = fdiv(z, 146097)
    local doe = z - era * 146097
    local yoe = fdiv(doe - fdiv(doe, 1460) + fdiv(doe, 36524) - fdiv(doe, 146096), 365)
    local doy = doe - (365 * yoe + fdiv(yoe, 4) - fdiv(yoe, 100))
    local mp = fdiv(5 * doy + 2, 153)
    local y, m = yoe + era * 400, mp + 3
    if mp >= 10 then m = mp - 9 end
    if m <= 2 then y = y + 1 end
    return (y - 1970) * 12 + m - 1
  end
  local function cal_start(i, p)
    if p.cal == 4 then return i * 7 * p.day - 3 * p.day end
    if p.cal ~= 5 then return i * p.period end
    -- days_from_civil (H. Hinnant) of the 1st of month i.
    local y, m = 1970 + fdiv(i, 12), math.fmod(i, 12) + 1
    if m <= 2 then y = y - 1 end
    local era = fdiv(y, 400)
    local yoe = y - era * 400
    local mp = m - 3
    if m <= 2 then mp = m + 9 end
    local doy = fdiv(153 * mp + 2, 5)
    local doe = yoe * 365 + fdiv(yoe, 4) - fdiv(yoe, 100) + doy
    return (era * 146097 + doe - 719468) * p.day
  end

  local function start_of(i, p)
    if p.cal then return cal_start(i, p) end
    return i * p.period
  end

  -- Time (ns) from now until the window in which a count of `over` past the
  -- limit (>= 1, counted in the state's window) has drained: the start of
  -- window + ceil(over / limit) (the core's until_window).
  local function until_window(st, p, over)
    local at = start_of(st.window + cdiv(over, p.limit), p)
    if at <= now then return 0 end
    return (at - now) * unit
  end

  function F.load(key, p)
    local st = {window = fdiv(now, p.period), count = 0}
    if p.cal then st.window = cal_index(now, p) end
    local raw = get(key)
    local w, c
    if raw then w, c = string.match(raw, '^(%d+) (%d+)$') end
    w, c = tonumber(w), tonumber(c)
    if w and w < 9007199254740992 and c <= p.limit * (DEBT_PERIODS + 1) then
      if w >= st.window then
        -- An earlier reading is decided in the stored window (no re-credit).
        st.window = w
        st.count = c
      elseif c > (st.window - w) * p.limit then
        -- A later window starts with what the stored count carries over.
        st.count = c - (st.window - w) * p.limit
      end
    elseif raw and string.byte(raw, 1) == 33 then
      st.mark = raw
    end
    local window_end = start_of(st.window + 1, p)
    st.until_next = (window_end - math.min(now, window_end)) * unit
    return st
  end

  function F.avail(st, p)
    if st.count >= p.limit then return 0 end
    return p.limit - st.count
  end

  function F.decide(st, p, c)
    if st.count <= p.limit and c <= p.limit - st.count then
      local used = st.count + c
      local reset = 0
      if used > 0 then reset = st.until_next end
      return 1, p.limit - used, 0, reset
    end
    -- The first window whose carried count leaves room for `c`.
    local retry = -1
    if c <= p.limit then retry = until_window(st, p, st.count + c - p.limit) end
    local reset = 0
    if st.count > 0 then reset = until_window(st, p, st.count) end
    return 0, F.avail(st, p), retry, reset
  end

  -- The TTL: until the count has drained (the end of the window for a
  -- count within the limit).
  local function fixed_store(key, st, p, count)
    if count <= 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, int(st.window) .. ' ' .. int(count), 'PX',
        ttl_ms(until_window(st, p, count)))
    end
  end

  function F.admit(key, st, p, c)
    if c > 0 then fixed_store(key, st, p, st.count + c) end
  end

  function F.refund(key, st, p, r, x)
    -- Only into the window the lease was taken in, if it is still the stored one.
    local lease_window = fdiv(stamp, p.period)
    if p.cal then lease_window = cal_index(stamp, p) end
    if st.count > 0 and st.window == lease_window then
      fixed_store(key, st, p, st.count - math.min(r, st.count))
    end
  end

  -- A control's refund of `n` permits (controls.lua, the core's
  -- FixedWindow::refund and CalendarWindow::refund): from the count
  -- current at now as load reads it (the stored window's, or what it
  -- carries into the current one, a debt included), floored at 0.
  function F.give(key, st, p, n)
    if st.count == 0 or n == 0 then return false end
    fixed_store(key, st, p, st.count - math.min(n, st.count))
    return true
  end

  -- A charge (charge.lua): the count runs past the limit up to `cap` (the
  -- core's debt cap, sent by the client); a count already past it stays.
  -- Returns the permits recorded and whether the count is within the limit.
  function F.charge(key, st, p, c, cap)
    local count = math.min(st.count + c, cap)
    if count <= st.count then return 0, st.count <= p.limit end
    fixed_store(key, st, p, count)
    return count - st.count, count <= p.limit
  end

  -- The most a count may reach with `k` permits owed beyond the limit
  -- (the core's debt_cap, k sent by the client: DEBT_PERIODS · limit within
  -- the core's count field).
  function F.cap(p, k)
    return p.limit + k
  end

  -- A carry (carry.lua, the core's FixedWindow and CalendarWindow
  -- carry_cell): the count `old` holds in the window current under `q`
  -- (a debt carried on as load reads it), scaled by the limits for
  -- Proportional (rounded up), counted in the window current under this
  -- limit; above the limit it is a debt, capped at F.cap(p, k).
  function F.carry(key, st, p, old, q, rule, k)
    local used = old.count
    if rule == 2 then used = scale(used, p.limit, q.limit) end
    used = math.min(used, F.cap(p, k))
    if used > 0 then fixed_store(key, st, p, used) end
  end
  return F
end

---------------------------------------------------------------------------
-- Sliding window counter (time wheel of n slots). State: a hash with
-- h = newest epoch, t = total, d = a charge's debt (absent when 0), and one
-- field per non-empty slot (epoch mod n). Slot e is [ceil(e·P/n),
-- ceil((e+1)·P/n)); `period` in clock units. The debt is the core's
-- SlidingWindow debt: permits charged beyond the limit, not yet in a slot,
-- that fill each slot's room as older slots leave the window; t + d above
-- (DEBT_PERIODS + 1) · limit is foreign.
local function sliding_module()
  local S = {}

  local function epoch_of(t, p)
    local q = fdiv(t, p.period)
    return q * p.n + fdiv((t - q * p.period) * p.n, p.period)
  end

  local function slot_start(e, p)
    local a = fdiv(e, p.n)
    return a * p.period + cdiv((e - a * p.n) * p.period, p.n)
  end

  local function slot(st, p, e)
    return st.counts[math.fmod(e, p.n)] or 0
  end

  -- Time (ns) until the window no longer holds epoch `e`.
  local function full_at(p, e)
    local s = slot_start(e + p.n, p) - now
    if s < 0 then s = 0 end
    return s * unit
  end

  -- The core's fill, rotate and advance_to: the head moves to `current`,
  -- slots that leave the window are emptied, and a debt fills the room
  -- each leaving slot makes, in the slot that replaces it (whole cycles of
  -- a full wheel at once, each paying `limit`).
  local function fill(st, p)
    local room = p.limit - st.total
    if room <= 0 or st.debt == 0 then return end
    local moved = math.min(st.debt, room)
    local i = math.fmod(st.head, p.n)
    st.counts[i] = (st.counts[i] or 0) + moved
    st.total = st.total + moved
    st.debt = st.debt - moved
  end

  local function rotate(st, p, current)
    if current - st.head >= p.n then
      st.counts = {}
      st.total = 0
    else
      for e = st.head + 1, current do
        local i = math.fmod(e, p.n)
        st.total = st.total - (st.counts[i] or 0)
        st.counts[i] = nil
      end
    end
    st.head = current
  end

  local function advance_to(st, p, current)
    while st.debt > 0 and st.head < current do
      if st.total == p.limit and st.debt >= p.limit and current - st.head >= p.n then
        local cycles = math.min(fdiv(current - st.head, p.n), fdiv(st.debt, p.limit))
        st.head = st.head + cycles * p.n
        st.debt = st.debt - cycles * p.limit
      else
        st.head = st.head + 1
        local i = math.fmod(st.head, p.n)
        st.total = st.total - (st.counts[i] or 0)
        st.counts[i] = nil
        fill(st, p)
      end
    end
    fill(st, p)
    rotate(st, p, current)
  end

  -- Runs `st` on until its debt is all in slots (the core's drain).
  local function drain(st, p)
    while st.debt > 0 do
      local next = st.head + 1
      if st.total == p.limit and st.debt > p.limit then
        next = st.head + fdiv(st.debt - 1, p.limit) * p.n
      end
      advance_to(st, p, next)
    end
  end

  local function copy(st)
    local counts = {}
    for i, v in pairs(st.counts) do counts[i] = v end
    return {head = st.head, total = st.total, debt = st.debt, counts = counts}
  end

  function S.load(key, p)
    local st = {head = 0, total = 0, debt = 0, counts = {}}
    local raw = redis.pcall('HGETALL', key)
    local ok = type(raw) == 'table' and not raw.err
    local sum = 0
    if ok then
      for i = 1, #raw, 2 do
        local f, v = raw[i], tonumber(raw[i + 1])
        if not nat(v) then ok = false; break end
        if f == 'h' then
          st.head = v
        elseif f == 't' then
          st.total = v
        elseif f == 'd' then
          st.debt = v
        else
          local index = tonumber(f)
          if not (nat(index) and index < p.n) then ok = false; break end
          st.counts[index] = v
        end
      end
      -- Every write keeps the total the sum of the slots.
      for _, v in pairs(st.counts) do sum = sum + v end
      if sum ~= st.total or st.total + st.debt > p.limit * (DEBT_PERIODS + 1) then ok = false end
    end
    if not ok then
      -- Not a state of this limit: read as none, and replaced at admission;
      -- a string may be a control's marker (src/controls.rs).
      local mark = nil
      if type(raw) == 'table' and raw.err then mark = get(key) end
      st = {head = 0, total = 0, debt = 0, counts = {}, foreign = true}
      if mark and string.byte(mark, 1) == 33 then st.mark = mark end
    end
    st.current = math.max(epoch_of(now, p), st.head)
    if st.debt > 0 then
      -- In debt: advanced to now as the core's decide_in_debt does on a
      -- copy (the debt filling the room older slots left); written back
      -- whole by an admission or a charge. A carry reads it as stored.
      st.stored = copy(st)
      advance_to(st, p, st.current)
      st.moved = true
      st.live = st.total + st.debt
      return st
    end
    -- Permits still in the window ending with `current`.
    local gone = st.current - st.head
    if gone >= p.n then
      st.live = 0
    else
      local expired = 0
      for i = 1, gone do expired = expired + slot(st, p, st.head + i) end
      st.live = st.total - expired
    end
    return st
  end

  local function newest_live(st, p)
    local oldest = st.current - (p.n - 1)
    if oldest < 0 then oldest = 0 end
    for e = st.head, oldest, -1 do
      if slot(st, p, e) > 0 then return e end
    end
    return nil
  end

  local function reset_of(st, p)
    local e = newest_live(st, p)
    if e then return full_at(p, e) end
    return 0
  end

  function S.avail(st, p)
    if st.live >= p.limit then return 0 end
    return p.limit - st.live
  end

  -- A denial while a debt is owed (the core's decide_in_debt): the waits
  -- found by running a copy on until the debt is in the slots, then until
  -- `c` fits.
  local function decide_in_debt(st, p, c)
    local paid = copy(st)
    drain(paid, p)
    paid.current = paid.head
    local reset = reset_of(paid, p)
    local retry = -1
    if c <= p.limit then
      local e = paid.head
      while not (paid.debt == 0 and paid.total <= p.limit and c <= p.limit - paid.total) do
        e = e + 1
        advance_to(paid, p, e)
      end
      retry = slot_start(e, p) - now
      if retry < 0 then retry = 0 end
      retry = retry * unit
    end
    return 0, S.avail(st, p), retry, reset
  end

  function S.decide(st, p, c)
    if st.debt > 0 then return decide_in_debt(st, p, c) end
    if c <= p.limit - st.live then
      local reset
      if c > 0 then reset = full_at(p, st.current) else reset = reset_of(st, p) end
      return 1, p.limit - st.live - c, 0, reset
    end
    local retry = -1
    if c <= p.limit then
      -- Move the window forward one slot at a time until enough has left;
      -- past the head nothing more leaves (a total above its slots' sum
      -- then never fits: "never", not an endless loop).
      local still, e = st.live, st.current
      while c > p.limit - still and e - p.n <= st.head do
        e = e + 1
        local leaving = e - p.n
        if leaving >= 0 and leaving + p.n > st.head and leaving <= st.head then
          still = still - slot(st, p, leaving)
        end
      end
      if c <= p.limit - still then retry = (slot_start(e, p) - now) * unit end
    end
    return 0, S.avail(st, p), retry, reset_of(st, p)
  end

  -- Writes the whole wheel (after a debt moved it, or a charge), with the
  -- TTL until it is as if never used: once its debt is in the slots and
  -- the newest of them has left the window.
  local function wheel_store(key, st, p)
    redis.call('DEL', key)
    local paid = copy(st)
    drain(paid, p)
    paid.current = paid.head
    local newest = newest_live(paid, p)
    if not newest then return end
    local fields = {'h', int(st.head), 't', int(st.total)}
    if st.debt > 0 then
      fields[#fields + 1] = 'd'
      fields[#fields + 1] = int(st.debt)
    end
    for i, v in pairs(st.counts) do
      if v > 0 then
        fields[#fields + 1] = int(i)
        fields[#fields + 1] = int(v)
        -- In batches: unpack() has a bounded stack (65,536 slots would not).
        if #fields >= 256 then
          redis.call('HSET', key, unpack(fields))
          fields = {}
        end
      end
    end
    if #fields > 0 then redis.call('HSET', key, unpack(fields)) end
    redis.call('PEXPIRE', key, ttl_ms(full_at(p, newest)))
  end

  function S.admit(key, st, p, c)
    if c == 0 then return end
    local n = p.n
    if st.moved then
      local i = math.fmod(st.current, n)
      st.counts[i] = (st.counts[i] or 0) + c
      st.total = st.total + c
      wheel_store(key, st, p)
      return
    end
    if st.foreign or st.current - st.head >= n then
      redis.call('DEL', key)
      st.counts = {}
      st.total = 0
    else
      for e = st.head + 1, st.current do
        local i = math.fmod(e, n)
        local old = st.counts[i]
        if old then
          st.total = st.total - old
          st.counts[i] = nil
          redis.call('HDEL', key, int(i))
        end
      end
    end
    local i = math.fmod(st.current, n)
    st.counts[i] = (st.counts[i] or 0) + c
    st.total = st.total + c
    redis.call('HSET', key, 'h', int(st.current), 't', int(st.total), int(i), int(st.counts[i]))
    redis.call('PEXPIRE', key, ttl_ms(full_at(p, st.current)))
  end

  function S.refund(key, st, p, r, x)
    -- A wheel moved by a debt is not credited (a lease is not refunded into
    -- a debt charged since: stricter, never looser).
    if st.foreign or st.moved then return end
    -- Only into the slot the lease was taken in, while it is still in the window.
    local e = epoch_of(stamp, p)
    if e > st.current - p.n and e <= st.head then
      local i = math.fmod(e, p.n)
      local back = math.min(r, st.counts[i] or 0)
      if back <= 0 then return end
      if st.total - back <= 0 then
        redis.call('DEL', key)
      else
        local left = st.counts[i] - back
        if left == 0 then
          redis.call('HDEL', key, int(i))
        else
          redis.call('HSET', key, int(i), int(left))
        end
        redis.call('HSET', key, 't', int(st.total - back))
      end
    end
  end

  -- A control's refund of `n` permits (controls.lua, the core's
  -- SlidingWindow::refund): the wheel advanced to now, then the debt (the
  -- newest permits) first, then the newest slots still in the window.
  function S.give(key, st, p, n)
    if st.foreign or n == 0 or st.live + st.debt == 0 then return false end
    if not st.moved then advance_to(st, p, st.current) end
    local left = n
    local from_debt = math.min(st.debt, left)
    st.debt = st.debt - from_debt
    left = left - from_debt
    local e = st.current
    while left > 0 and e >= 0 and e > st.current - p.n do
      local i = math.fmod(e, p.n)
      local take = math.min(st.counts[i] or 0, left)
      if take > 0 then
        st.counts[i] = st.counts[i] - take
        st.total = st.total - take
        left = left - take
      end
      e = e - 1
    end
    wheel_store(key, st, p)
    return true
  end

  -- A charge (charge.lua, the core's SlidingWindow::charge): the wheel
  -- advanced to now, what it has room for in the current slot, the rest a
  -- debt; the wheel and its debt hold at most `cap` (the core's
  -- (DEBT_PERIODS + 1) · limit, sent by the client). Returns the permits
  -- recorded and whether nothing is owed after.
  function S.charge(key, st, p, c, cap)
    if not st.moved then
      if st.foreign then st.head = st.current end
      advance_to(st, p, st.current)
    end
    local held = st.total + st.debt
    local recorded = 0
    if cap > held then recorded = math.min(c, cap - held) end
    if recorded > 0 then
      st.debt = st.debt + recorded
      fill(st, p)
      wheel_store(key, st, p)
    end
    return recorded, st.debt == 0
  end

  -- The most the wheel and its debt may hold with `k` permits owed beyond
  -- the limit (k = DEBT_PERIODS · limit: the core's cap).
  function S.cap(p, k)
    return p.limit + k
  end

  -- A carry (carry.lua, the core's SlidingWindow::carry_cell; Proportional
  -- is Keep): a wheel of the same geometry keeps its slots and debt; of
  -- another, what still counts under `q` moves into the slot current under
  -- this limit, so it leaves no earlier, the debt with it. Nothing is
  -- dropped beyond this limit (a wheel above it is refused until enough
  -- leaves) but past the debt cap, S.cap(p, k): the wheel is run on to now
  -- and, still past the cap, left as a charge to the cap leaves it: slots
  -- above the limit gathered in the newest as the limit (they leave no
  -- earlier), the rest of the cap a debt.
  function S.carry(key, st, p, old, q, rule, k)
    if old.foreign then return end
    local w = copy(old.stored or old)
    if q.period ~= p.period or q.n ~= p.n then
      advance_to(w, q, math.max(epoch_of(now, q), w.head))
      local head = epoch_of(now, p)
      w = {head = head, total = w.total, debt = w.debt, counts = {}}
      w.counts[math.fmod(head, p.n)] = w.total
    end
    fill(w, p)
    local most = S.cap(p, k)
    if w.total + w.debt > most then
      advance_to(w, p, math.max(epoch_of(now, p), w.head))
    end
    if w.total + w.debt > most then
      if w.total > p.limit then
        w.counts = {[math.fmod(w.head, p.n)] = p.limit}
        w.total = p.limit
      end
      w.debt = most - w.total
      fill(w, p)
    end
    wheel_store(key, w, p)
  end
  return S
end

---------------------------------------------------------------------------
-- Warm-up (the core's algorithm::warm_up). State "F S": F the instant (ns)
-- the next request may go, S the idle permits at F (units); absent or not
-- a state: cold, as fresh. Exact naturals (bignum.lua) and the transition
-- (warm_math.lua) come from the preludes src/script.rs puts before this
-- script; `p.k` holds the limit's constants as naturals.
local function warm_module()
  local W = {}
  local N = bignum()
  -- Durations in a reply stay below 2^53 ns (limit.rs refuses a limit whose
  -- cost or cold time could pass it); a clock stepped far back is capped.
  local LONGEST = N.big('9007199254740991')

  local function ns(x)
    return N.num(N.min(x, LONGEST))
  end

  function W.load(key, p)
    local st = {now = N.mul(N.small(now), N.small(unit))}
    local raw = get(key)
    st.f, st.s = p.math.parse(raw)
    if not st.f then
      st.f, st.s = {0}, p.k.max
      if raw and string.byte(raw, 1) == 33 then st.mark = raw end
    end
    st.owed = N.cmp(st.now, st.f) < 0
    return st
  end

  function W.avail(st, p)
    if st.owed then return 0 end
    return p.burst
  end

  -- Time until the state is as cold as a fresh one.
  local function reset_of(st, p, f, s)
    local cold = p.math.cold_at(f, s)
    if N.cmp(cold, st.now) <= 0 then return 0 end
    return ns(N.sub(cold, st.now))
  end

  -- The state after `c` permits taken at `now` (nothing owed).
  local function next_of(st, p, c)
    local s = p.math.idle(st.f, st.s, st.now)
    local n = N.small(c)
    return N.add(st.now, p.math.cost(s, n)), p.math.take(s, n)
  end

  function W.decide(st, p, c)
    local reset = reset_of(st, p, st.f, st.s)
    if c == 0 then
      if st.owed then return 1, 0, 0, reset end
      return 1, p.burst, 0, reset
    end
    if st.owed then return 0, 0, ns(N.sub(st.f, st.now)), reset end
    if c > p.burst then return 0, p.burst, -1, reset end
    local f, s = next_of(st, p, c)
    return 1, 0, 0, reset_of(st, p, f, s)
  end

  local function warm_store(key, st, p, f, s)
    -- The TTL: until cold again, in whole ms rounded up, plus the slack.
    local ttl = N.ceil_div(N.sub(p.math.cold_at(f, s), st.now), {1000000})
    redis.call('SET', key, p.math.format(f, s), 'PX', N.str(N.add(ttl, N.small(slack))))
  end

  function W.admit(key, st, p, c)
    if c > 0 then
      local f, s = next_of(st, p, c)
      warm_store(key, st, p, f, s)
    end
  end

  -- Gives back `r` permits of a lease (WarmUp::refund); `x` is unused.
  function W.refund(key, st, p, r, x)
    local f, s = p.math.refund(st.f, st.s, st.now, N.small(r))
    if f then warm_store(key, st, p, f, s) end
  end

  -- The most a warm-up may owe (ns past now, a natural) with `k` permits
  -- of debt: k stable intervals (k = DEBT_PERIODS · limit: DEBT_PERIODS
  -- periods, the core's cap).
  function W.cap(p, k)
    return N.ceil_div(N.mul(N.small(k), p.k.t), p.k.l)
  end

  -- `c` permits taken at now on a state that owes nothing, whether or not
  -- they fit, as many as end within `cap` ns (the core's WarmUp::charge,
  -- for a change of algorithm into a warm-up: carry.lua): the most that
  -- fit, by bisection (a cost grows with the permits). Not a budget's
  -- charge: charge.lua refuses warm-up limits.
  function W.reserve(key, st, p, c, cap)
    local s = p.math.idle(st.f, st.s, st.now)
    local function fits(n)
      return N.cmp(p.math.cost(s, N.small(n)), cap) <= 0
    end
    if not fits(c) then
      local lo, hi = 0, c
      while hi - lo > 1 do
        local mid = lo + fdiv(hi - lo, 2)
        if fits(mid) then lo = mid else hi = mid end
      end
      c = lo
    end
    W.admit(key, st, p, c)
  end

  -- A carry (carry.lua, the core's WarmUp::carry_cell; Proportional is
  -- Keep): what `old` owes under `q` in stable intervals rescaled to this
  -- rate, at most the debt cap W.cap(p, k), and its idle permits as a
  -- fraction of the cold maximum, both rounded up (colder, never warmer).
  -- Nothing written if that is as cold as a fresh state.
  function W.carry(key, st, p, old, q, rule, k)
    local idle = q.math.idle(old.f, old.s, old.now)
    local s = N.min(N.ceil_div(N.mul(idle, p.k.max), q.k.max), p.k.max)
    local f = old.now
    if N.cmp(old.f, old.now) > 0 then
      local owed = N.mul(N.mul(N.sub(old.f, old.now), p.k.t), q.k.l)
      owed = N.min(N.ceil_div(owed, N.mul(p.k.l, q.k.t)), W.cap(p, k))
      f = N.add(old.now, owed)
    end
    if N.cmp(p.math.cold_at(f, s), st.now) > 0 then warm_store(key, st, p, f, s) end
  end

  -- A control's refund of `n` permits (controls.lua): WarmUp::refund, as a
  -- lease's. Returns whether the state changed.
  function W.give(key, st, p, n)
    local f, s = p.math.refund(st.f, st.s, st.now, N.small(n))
    if not f then return false end
    warm_store(key, st, p, f, s)
    return true
  end

  -- The limit's parameters from `w<cold> burst l t warmup`, or nil.
  function W.params(alg, a1, a2, a3, a4)
    local cold = tonumber(string.match(alg, '^w([1-9]%d?%d?%d?%d?%d?%d?%d?%d?%d?)$'))
    if not (cold and cold < 4294967296 and a3 >= 1 and a4 >= 1) then return nil end
    local k = warm_constants(N, a1, a2, a3, a4, cold)
    -- `capacity`: the room an allow-listed key's reply gives a limit that
    -- does not bind (listed_reply).
    return {alg = W, burst = a1, capacity = a1, size = a1, k = k, math = warm_math(N, k)}
  end
  return W
end

---------------------------------------------------------------------------
-- Only the algorithms in use are built: each closure costs on every call.
local G, F, S, W
local STRIDE = 6
local limits, states = {}, {}
for i = 1, #KEYS do
  local b = 5 + (i - 1) * STRIDE
  local alg = ARGV[b + 1]
  local a1, a2, a3, a4 = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  local x = tonumber(ARGV[b + 6])
  if not (nat(a1) and a1 >= 1 and nat(a2) and a2 >= 1 and nat(a3) and nat(a4) and nat(x)) then
    return invalid()
  end
  local p
  if alg == 'g' then
    local us = unit * a1
    if a1 > 16 or a3 < a2 or a3 >= 4503599627370496 or a4 * us > 9000000000000000
        or a4 * us + us <= 9000000000000000 then
      return invalid()
    end
    G = G or gcra_module()
    p = {alg = G, scale = a1, interval = a2, capacity = a3, m = a4, size = fdiv(a3, a2)}
  elseif alg == 'f' then
    if a1 >= 4503599627370496 or a3 ~= 0 or a4 ~= 0 then return invalid() end
    F = F or fixed_module()
    p = {alg = F, period = a1, limit = a2, size = a2}
  elseif alg == 'c' then
    -- Calendar window: a1 the unit (1 minute ... 5 month), a2 the limit.
    if a1 > 5 or a3 ~= 0 or a4 ~= 0 then return invalid() end
    F = F or fixed_module()
    local second = 1000000000 / unit
    local day = 86400 * second
    local periods = {60 * second, 3600 * second, day, 7 * day, day}
    p = {alg = F, period = periods[a1], limit = a2, cal = a1, day = day, size = a2}
  elseif alg == 's' then
    if a3 < 1 or a4 ~= 0 or a1 * a2 >= 9007199254740992 then return invalid() end
    S = S or sliding_module()
    p = {alg = S, period = a1, n = a2, limit = a3, size = a3}
  elseif string.byte(alg, 1) == 119 then
    -- 'w<cold factor>': warm-up (see warm_module).
    W = W or warm_module()
    p = W.params(alg, a1, a2, a3, a4)
    if not p then return invalid() end
  else
    return invalid()
  end
  p.x = x
  -- The core's variant (a calendar window is not a fixed one): 'g', 'f',
  -- 'c', 's' or 'w'.
  p.kind = string.sub(alg, 1, 1)
  limits[i] = p
  states[i] = p.alg.load(KEYS[i], p)
end

-- Controls' markers (src/controls.rs) over the limits' states: 'd' (a deny
-- list) over 'a' (an allow list) over 'p' (a penalty, with its end; -1
-- without one); nil when none is in force (a penalty past its end is none).
local function marker()
  local mark, mark_end = nil, nil
  for i = 1, #KEYS do
    local raw = states[i].mark
    if raw then
      local kind = string.sub(raw, 2, 2)
      if kind == 'd' then
        mark = 'd'
      elseif kind == 'a' and mark ~= 'd' then
        mark = 'a'
      elseif kind == 'p' and (mark == nil or mark == 'p') then
        local e = tonumber(string.sub(raw, 3))
        if e == nil then
          mark, mark_end = 'p', -1
        elseif e > now and mark_end ~= -1 and (mark_end == nil or e > mark_end) then
          mark, mark_end = 'p', e
        end
      end
    end
  end
  return mark, mark_end
end

-- The reply {allowed, 0, now, (allowed_i, headroom_i, retry_i, reset_i)×m}
-- to a request of `take` permits on the states `sts` (the loaded ones by
-- default), nothing written. A denial takes nothing: every admitting limit
-- then reports its time back to full with nothing taken, as the core's
-- AllOf does (a denying limit's is that already).
local function verdicts(take, sts)
  sts = sts or states
  local reply = {1, 0, now}
  for i = 1, #KEYS do
    local allowed, headroom, retry, reset = limits[i].alg.decide(sts[i], limits[i], take)
    if allowed == 0 then reply[1] = 0 end
    local at = 3 + (i - 1) * 4
    reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = allowed, headroom, retry, reset
  end
  if reply[1] == 0 then
    for i = 1, #KEYS do
      local at = 3 + (i - 1) * 4
      if reply[at + 1] == 1 then
        local _, _, _, reset = limits[i].alg.decide(sts[i], limits[i], 0)
        reply[at + 4] = reset
      end
    end
  end
  return reply
end

-- An allow-listed key's reply to a request of `take` permits: admitted,
-- counting nothing, reporting what a look of `take` at the state the list
-- holds aside (`<key>!held`, controls.lua) reports, as the core's listed
-- decision does: that look's remaining and reset_after if it would admit;
-- if not, 0 remaining and its reset_after (each limit's reset as the
-- denial reports it, and the binding denial's limit: the client's
-- binding() then picks it, the one left with 0, every other limit with
-- room).
local function listed_reply(take)
  local held = {}
  for i = 1, #KEYS do held[i] = limits[i].alg.load(KEYS[i] .. '!held', limits[i]) end
  local reply = verdicts(take, held)
  if reply[1] == 1 then return reply end
  -- The binding denial: the longest retry in ns (-1: never), the first
  -- of equals (limit.rs's binding()).
  local binding, longest = nil, -1
  for i = 1, #KEYS do
    local at = 3 + (i - 1) * 4
    if reply[at + 1] == 0 then
      local retry = reply[at + 3]
      if retry == -1 then
        retry = math.huge
      else
        retry = cdiv(retry, limits[i].scale or 1)
      end
      if retry > longest then binding, longest = i, retry end
    end
  end
  reply[1] = 1
  for i = 1, #KEYS do
    local p, at = limits[i], 3 + (i - 1) * 4
    local headroom = p.capacity or p.limit
    if i == binding then headroom = 0 end
    reply[at + 1], reply[at + 2], reply[at + 3] = 1, headroom, 0
  end
  return reply
end

-- The reply {allowed, 0, now, (allowed_i, headroom_i, retry_i, reset_i)×m}
-- of a key under marker `mark` (see marker()) to a request of `take`
-- permits: decided before any limit, nothing counted. Denied (a deny
-- list, a penalty): 0 remaining, retry and reset the penalty's time left
-- (-1: never); allowed: listed_reply.
local function marked_reply(mark, mark_end, take)
  if mark == 'a' then return listed_reply(take) end
  local reply = {0, 0, now}
  for i = 1, #KEYS do
    local p, at = limits[i], 3 + (i - 1) * 4
    local left = -1
    if mark == 'p' and mark_end ~= -1 then left = (mark_end - now) * unit * (p.scale or 1) end
    reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4] = 0, 0, left, left
  end
  return reply
end

-- Moves the control's marker `mark` (unless nil) from `old`, a previous
-- limit's key, to `new` with its TTL (carry.lua, controls.lua). What a list
-- held aside under `old` (controls.lua) goes back to `old`, to be carried
-- once the key is unlisted; else `old` is dropped.
local function move_marker(new, old, mark)
  if mark then
    local pttl = redis.call('PTTL', old)
    if pttl > 0 then
      redis.call('SET', new, mark, 'PX', pttl)
    else
      redis.call('SET', new, mark)
    end
  end
  if redis.call('EXISTS', old .. '!held') == 1 then
    redis.call('RENAME', old .. '!held', old)
  else
    redis.call('DEL', old)
  end
end
