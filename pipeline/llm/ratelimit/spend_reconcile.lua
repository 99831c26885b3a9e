-- spend_reconcile.lua: set a capped run's budget and raise its spend to what Postgres recorded.
-- Unit: nano-USD (integers, so that additions are exact).
--
-- KEYS[1] spend  HASH  budget = the run's cap, spent = what its calls cost
--
-- ARGV[1] budget (nano-USD)   ARGV[2] spent as recorded in Postgres (nano-USD)
-- ARGV[3] TTL of the hash (ms)
--
-- Returns {budget, spent}. The spend only ever rises: calls add their cost here when their
-- answer comes back, before it is recorded, so Postgres is behind, never ahead, unless a cost was
-- recorded without being added (a batch line, a worker of an older version): then it catches up.

local budget, recorded, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
if recorded > spent then spent = recorded end
redis.call('HSET', KEYS[1], 'budget', budget, 'spent', spent)
redis.call('PEXPIRE', KEYS[1], ttl)
return {budget, spent}
