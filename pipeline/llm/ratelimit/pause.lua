-- pause.lua: after a provider's 429, make every worker wait, and cut the adaptive factor.
-- Time unit: milliseconds, from Redis TIME.
-- Python side: pipeline/llm/ratelimit/scripts.py (PauseKeys, PauseArgs, Paused: the same names, in
-- this order).
--
-- KEYS[1] pause  STRING "pause until" (ms)
-- KEYS[2] aimd   HASH   factor, cut_at
--
-- ARGV[1] pause (ms)          ARGV[2] decrease (multiplier, e.g. 0.7; 1 = no cut)
-- ARGV[3] minimum factor      ARGV[4] recovery (ms from factor 0 to 1)
-- ARGV[5] cooldown (ms): a cut within this time of the previous one is skipped,
--         so one burst of 429s counts as one congestion event
-- ARGV[6] key TTL (ms)
-- ARGV[7] shift (ms) added to Redis TIME; 0 outside tests, which move the clock instead of sleeping
--
-- Returns {pause until (ms), factor after * 1e6}.

local pause_ms, decrease, floor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local recovery, cooldown, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local shift_ms = tonumber(ARGV[7])

-- Redis 6 needs effects replication before a write that follows TIME (the default from 7).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + shift_ms

local until_ms = now + pause_ms
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if until_ms > current then
  redis.call('SET', KEYS[1], until_ms, 'PX', pause_ms + 1000)
else
  until_ms = current
end

local factor, cut_at = 1, nil
local state = redis.call('HMGET', KEYS[2], 'factor', 'cut_at')
if state[1] then
  cut_at = tonumber(state[2])
  factor = math.min(1, tonumber(state[1]) + (now - cut_at) / recovery)
end
if decrease < 1 and (cut_at == nil or now - cut_at >= cooldown) then
  factor = math.max(floor, factor * decrease)
  redis.call('HSET', KEYS[2], 'factor', factor, 'cut_at', now)
  redis.call('PEXPIRE', KEYS[2], math.ceil(recovery * (1 - factor)) + ttl)
end
return {until_ms, math.floor(factor * 1000000)}
