-- tollgate: The lists' registry: `KEYS[1]` the set, `ARGV` = member, capacity, `+`
-- (reserve) or `-` (release). Reserving answers `{1}` if the key is (now)
-- in the set, `{0}` if the set is full.
local key, member = KEYS[1], ARGV[1]
if ARGV[3] == '-' then
  redis.call('SREM', key, member)
  return {1}
end
if redis.call('SISMEMBER', key, member) == 1 then return {1} end
if redis.call('SCARD', key) >= tonumber(ARGV[2]) then return {0} end
redis.call('SADD', key, member)
return {1}
