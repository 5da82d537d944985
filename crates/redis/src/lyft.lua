-- tollgate: envoyproxy/ratelimit's fixed-window counter (its
-- src/redis/fixed_cache_impl.go), checked and counted in one atomic step.
-- KEYS[1]: the counter, at Lyft's cache key. ARGV: op ('c' check, 'p' peek),
-- hits, limit, expire (seconds). The value is Lyft's: a plain integer that
-- INCRBY keeps. A check whose hits fit (count + hits <= limit) runs Lyft's
-- two commands, INCRBY hits then EXPIRE expire; anything else writes nothing.
-- Reply: {1 admitted / 0 refused, the count after}.
local op, hits, limit, expire = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not (#KEYS == 1 and #ARGV == 4 and (op == 'c' or op == 'p') and hits and limit and expire
    and hits >= 0 and limit >= 0 and expire >= 1 and hits % 1 + limit % 1 + expire % 1 == 0
    and hits < 9007199254740992 and limit < 9007199254740992) then
  return redis.error_reply('ERR tollgate: invalid arguments: ' .. table.concat(ARGV, ' '))
end
local count = 0
local raw = redis.call('GET', KEYS[1])
if raw then
  count = tonumber(raw)
  -- Lyft's INCRBY fails on anything but an integer: so does this.
  if not count or count % 1 ~= 0 or count < 0 then
    return redis.error_reply('ERR tollgate: the value at the key is not a count')
  end
end
if hits <= limit - count then
  if op == 'c' and hits > 0 then
    count = redis.call('INCRBY', KEYS[1], hits)
    redis.call('EXPIRE', KEYS[1], expire)
  end
  return {1, count}
end
return {0, count}
