-- release.lua: end a permit: free its in-flight lease and set its tokens to what the call used.
-- Time unit: milliseconds.
--
-- KEYS[1] costs    HASH  permit id -> tokens reserved
-- KEYS[2] tokens   STRING sum of costs in the window
-- KEYS[3] inflight ZSET  permit id -> lease expiry
--
-- ARGV[1] permit id     ARGV[2] tokens used (-1: unknown, keep the reservation)
--
-- Returns the tokens refunded (negative when the call used more than it reserved).
-- A permit already out of the window refunds nothing: its tokens no longer count.

local id, actual = ARGV[1], tonumber(ARGV[2])
redis.call('ZREM', KEYS[3], id)
if actual < 0 then return 0 end
local reserved = tonumber(redis.call('HGET', KEYS[1], id) or '-1')
if reserved < 0 then return 0 end
local refund = reserved - actual
if refund ~= 0 then
  redis.call('HSET', KEYS[1], id, actual)
  redis.call('DECRBY', KEYS[2], refund)
end
return refund
