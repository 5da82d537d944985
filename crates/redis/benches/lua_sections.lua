-- The Lua time of gcra.lua's common path, section by section: each section
-- (copied from the script) runs 200,000 times in a loop between two TIME
-- readings, and the reply lists nanoseconds per run (`empty` is the loop's
-- own cost). Pure Lua: no redis.call but the clock. See BENCHMARKS.md.
--
--   redis-cli --eval crates/redis/benches/lua_sections.lua k , \
--     c '' 1 10 1 g 1 1 1000000 9000000000000 0
local N = 200000
local A = ARGV
local function clock() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end
local res = {}
local function run(name, f)
  local t0 = clock()
  for i = 1, N do f() end
  res[#res + 1] = name .. '=' .. string.format('%.1f', (clock() - t0) * 1000 / N)
end
run('empty', function() end)
run('parse_8_numbers', function()
  local num = tonumber
  local op, cost, slack, stamp = A[1], num(A[3]), num(A[4]), num(A[5])
  local scale, iv, cap, m = num(A[7]), num(A[8]), num(A[9]), num(A[10])
  local x = A[11] == '0' and 0 or num(A[11])
end)
local now, cost, slack, stamp, scale, iv, cap, m, x, op, us = 1795565696588533, 1, 10, 1, 1, 1, 1000000, 9000000000000, 0, 'c', 1000
run('validate_9_numbers', function()
  if not (now and cost and slack and stamp and scale and iv and cap and m and x
    and (op == 'c' or op == 'p') and A[6] == 'g' and #A == 11 and #KEYS == 1
    and now >= 0 and cost >= 0 and slack >= 0 and stamp >= 0 and scale >= 1 and iv >= 1
    and m >= 1 and x >= 0 and now % 1 + cost % 1 + slack % 1 + stamp % 1 + scale % 1
    + iv % 1 + cap % 1 + m % 1 + x % 1 == 0
    and now < 9007199254740992 and cost < 9007199254740992 and stamp < 9007199254740992
    and x < 9007199254740992
    and slack <= 86400000 and scale <= 16 and cap >= iv and cap < 4503599627370496
    and m * us <= 9000000000000000 and (m + 1) * us > 9000000000000000) then
    error('x')
  end
end)
local t = {'1795565696', '588533'}
run('time_to_number', function() local n = t[1] * 1000000 + t[2] end)
local fmod = math.fmod
run('decide_and_ttl', function()
  local M = m * us
  local cur = fmod(now, m) * us
  local debt = 0
  local raw = false
  local tat = tonumber(raw)
  local wanted = debt + cost * iv
  if wanted > cap then return end
  local d = scale * 1000000
  local r = fmod(wanted, d)
  local ttl = (wanted - r) / d + slack
  if r > 0 then ttl = ttl + 1 end
  local tat = wanted - (M - cur)
  if tat < 0 then tat = tat + M end
end)
run('format_state', function() local s = string.format('%d', 1795565696588533) end)
run('reply_table_7', function() local s = {1, 1, now, 1, 5, 0, 7} end)
run('argv_len', function() local n = #A end)
return res
