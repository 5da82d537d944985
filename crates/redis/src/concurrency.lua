-- Concurrency slots as leases: one sorted set per key, member
-- "<lease id>#<i>" for each slot of a lease, score its expiry (ms).
-- Expired leases are pruned first, on every call, so a node that died
-- holding slots frees them when their leases expire.
--
-- KEYS[1]  the key's sorted set
-- ARGV[1]  'a' acquire, 'r' release, 'e' extend
-- ARGV[2]  lease id
-- ARGV[3]  cost: slots in the lease
-- ARGV[4]  limit
-- ARGV[5]  lease TTL (ms)
-- ARGV[6]  now (ms), or '' for the server's TIME
--
-- Reply: {ok (1/0), slots held after, ms until the first lease expires
-- (on a refusal; 0 otherwise)}. For a release, ok says whether the lease
-- was live (its slots found); for an extend, whether it still was.
--
-- Every write sets the key's TTL to at least the lease TTL: the key never
-- outlives its last lease by more than that, and never lives without a TTL.
local key = KEYS[1]
local op = ARGV[1]
local id = ARGV[2]
local cost = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local now
if ARGV[6] ~= '' then
  now = tonumber(ARGV[6])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)

local function keep_ttl()
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end

if op == 'a' then
  local held = redis.call('ZCARD', key)
  if held + cost > limit then
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local wait = 0
    if first[2] then
      wait = tonumber(first[2]) - now
    end
    return {0, held, wait}
  end
  local expiry = now + ttl
  for i = 1, cost do
    redis.call('ZADD', key, expiry, id .. '#' .. i)
  end
  keep_ttl()
  return {1, held + cost, 0}
elseif op == 'r' then
  local removed = 0
  for i = 1, cost do
    removed = removed + redis.call('ZREM', key, id .. '#' .. i)
  end
  local held = redis.call('ZCARD', key)
  if held == 0 then
    redis.call('DEL', key)
  end
  if removed == cost then
    return {1, held, 0}
  end
  return {0, held, 0}
elseif op == 'e' then
  local expiry = now + ttl
  local renewed = 0
  for i = 1, cost do
    local member = id .. '#' .. i
    if redis.call('ZSCORE', key, member) then
      redis.call('ZADD', key, expiry, member)
      renewed = renewed + 1
    end
  end
  local held = redis.call('ZCARD', key)
  if held > 0 then
    keep_ttl()
  end
  if renewed == cost then
    return {1, held, 0}
  end
  return {0, held, 0}
end
return redis.error_reply('unknown op ' .. tostring(op))
