-- tollgate: exact unbounded naturals for the scripts whose numbers pass
-- 2^53 (warm-up: instants in ns, idle permits in units, and products of
-- them up to 2^128). Prepended to the scripts that use it (src/script.rs,
-- src/warm_up.rs); `bignum()` builds the functions only when a script calls
-- it, so a call that needs none pays for one closure.
--
-- A number is an array of base-10^7 limbs, least significant first, parsed
-- from and written as decimal strings: no value goes through a double.
local function bignum()
  local B = 10000000
  local N = {}

  local function trim(r)
    while #r > 1 and r[#r] == 0 do r[#r] = nil end
    return r
  end

  -- A decimal string of digits.
  function N.big(s)
    local r, i = {}, #s
    while i >= 1 do
      local j = i - 6
      if j < 1 then j = 1 end
      r[#r + 1] = tonumber(string.sub(s, j, i))
      i = j - 1
    end
    return trim(r)
  end

  -- A Lua integer below 2^53.
  function N.small(x)
    local r = {}
    repeat
      local d = x % B
      r[#r + 1] = d
      x = (x - d) / B
    until x == 0
    return r
  end

  function N.str(a)
    local parts = {string.format('%d', a[#a])}
    for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format('%07d', a[i]) end
    return table.concat(parts)
  end

  -- As a Lua number: exact below 2^53 (the caller's bound).
  function N.num(a)
    local x = 0
    for i = #a, 1, -1 do x = x * B + a[i] end
    return x
  end

  function N.cmp(a, b)
    if #a ~= #b then return #a < #b and -1 or 1 end
    for i = #a, 1, -1 do
      if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
    end
    return 0
  end
  local cmp = N.cmp

  function N.add(a, b)
    local r, c = {}, 0
    for i = 1, math.max(#a, #b) do
      local v = (a[i] or 0) + (b[i] or 0) + c
      if v >= B then r[i], c = v - B, 1 else r[i], c = v, 0 end
    end
    if c > 0 then r[#r + 1] = c end
    return r
  end
  local add = N.add

  -- a - b, for a >= b.
  function N.sub(a, b)
    local r, c = {}, 0
    for i = 1, #a do
      local v = a[i] - (b[i] or 0) - c
      if v < 0 then r[i], c = v + B, 1 else r[i], c = v, 0 end
    end
    return trim(r)
  end
  local sub = N.sub

  -- Each partial sum is below 10^7 + 10^14 + 10^7 < 2^53: exact.
  function N.mul(a, b)
    local r = {}
    for i = 1, #a + #b do r[i] = 0 end
    for i = 1, #a do
      local ai, c = a[i], 0
      if ai ~= 0 then
        for j = 1, #b do
          local v = r[i + j - 1] + ai * b[j] + c
          c = math.floor(v / B)
          r[i + j - 1] = v - c * B
        end
        local k = i + #b
        while c > 0 do
          local v = r[k] + c
          c = math.floor(v / B)
          r[k] = v - c * B
          k = k + 1
        end
      end
    end
    return trim(r)
  end
  local mul = N.mul

  -- Quotient and remainder: long division, one limb of the quotient at a
  -- time by bisection.
  function N.divmod(a, b)
    local q, rem = {}, {0}
    for i = #a, 1, -1 do
      table.insert(rem, 1, a[i])
      trim(rem)
      local lo, hi = 0, B - 1
      while lo < hi do
        local mid = math.floor((lo + hi + 1) / 2)
        if cmp(mul(b, {mid}), rem) <= 0 then lo = mid else hi = mid - 1 end
      end
      q[i] = lo
      if lo > 0 then rem = sub(rem, mul(b, {lo})) end
    end
    return trim(q), rem
  end

  function N.ceil_div(a, b)
    local q, r = N.divmod(a, b)
    if cmp(r, {0}) > 0 then q = add(q, {1}) end
    return q
  end

  function N.min(a, b) if cmp(a, b) <= 0 then return a end return b end
  function N.max(a, b) if cmp(a, b) >= 0 then return a end return b end

  return N
end
