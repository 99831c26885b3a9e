-- spend_hold.lua: hold a call's largest cost against a capped run's budget, before the call.
-- Unit: nano-USD (integers). Time: milliseconds, from Redis TIME (never the caller's clock).
--
-- KEYS[1] spend   HASH  budget, spent (what answered calls cost), held (what calls in flight may)
-- KEYS[2] holds   ZSET  member "<id>:<nano-USD>", score = when the hold expires (a worker that died
--                       mid-call never settles it: the next hold drops it from `held`)
-- KEYS[3] marker  STRING the reconcile marker: set here once per period (the caller then reconciles)
--
-- ARGV[1] the call's largest cost (nano-USD)   ARGV[2] the hold's member
-- ARGV[3] the hold's life (ms)                 ARGV[4] TTL of the hash and the set (ms)
-- ARGV[5] the reconcile period (ms)
--
-- Returns {granted (1/0; -1: the count is not open, nothing done), budget, spent, held, reconcile}.
-- Granted only while spent + held + the call's cost stays within the budget, and the budget is not
-- spent: threads and workers asking at once are served one at a time.

local budget = redis.call('HGET', KEYS[1], 'budget')
if not budget then return {-1, 0, 0, 0, 0} end
budget = tonumber(budget)
-- Redis 6 needs effects replication before a write that follows TIME (the default from 7).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0')
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, member in ipairs(expired) do
  held = held - tonumber(string.match(member, ':(%d+)$'))
end
if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
if held < 0 then held = 0 end
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local amount = tonumber(ARGV[1])
local granted = 0
if spent < budget and spent + held + amount <= budget then
  granted = 1
  held = held + amount
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[2])
end
redis.call('HSET', KEYS[1], 'held', held)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
local reconcile = 0
if redis.call('SET', KEYS[3], 1, 'NX', 'PX', ARGV[5]) then reconcile = 1 end
return {granted, budget, spent, held, reconcile}
