-- spend_settle.lua: a held call came back: its hold is replaced by what it cost.
-- Unit: nano-USD (integers).
--
-- KEYS[1] spend  HASH (see spend_hold.lua)   KEYS[2] holds  ZSET
--
-- ARGV[1] the hold's member "<id>:<nano-USD>"   ARGV[2] what the call cost (nano-USD; 0: it
-- failed, nothing billed)   ARGV[3] TTL of the hash (ms)
--
-- Returns what is still held. A hold that expired already (dropped by a later hold) is not
-- taken from `held` twice; the call's cost is counted all the same.

local held = tonumber(redis.call('HGET', KEYS[1], 'held') or '0')
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  held = held - tonumber(string.match(ARGV[1], ':(%d+)$'))
  if held < 0 then held = 0 end
  redis.call('HSET', KEYS[1], 'held', held)
end
if tonumber(ARGV[2]) > 0 then redis.call('HINCRBY', KEYS[1], 'spent', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return held
