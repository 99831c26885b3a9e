-- acquire.lua: admit one LLM call against a sliding-window log of requests and tokens,
-- an in-flight cap, a shared pause and an adaptive (AIMD) factor, all at once.
-- Time unit: milliseconds, from Redis TIME (never the caller's clock).
--
-- KEYS[1] log      ZSET  permit id -> admitted at (ms)
-- KEYS[2] costs    HASH  permit id -> tokens reserved (refunded to actual use by release.lua)
-- KEYS[3] tokens   STRING sum of costs of the permits in the window
-- KEYS[4] inflight ZSET  permit id -> lease expiry (ms)
-- KEYS[5] pause    STRING shared "pause until" (ms), set by pause.lua after a 429
-- KEYS[6] aimd     HASH  factor = effective share after the last cut, cut_at = when (ms)
--
-- ARGV[1] rpm (0: none)       ARGV[2] tpm (0: none)      ARGV[3] max in flight (0: none)
-- ARGV[4] cost in tokens      ARGV[5] permit id          ARGV[6] window (ms)
-- ARGV[7] lease (ms)          ARGV[8] recovery (ms from factor 0 to 1)
-- ARGV[9] key TTL beyond the window (ms)
--
-- Returns {admitted 0/1, wait ms, reason, requests in window, tokens in window, factor * 1e6,
-- now (ms)}.
-- Requests and tokens are committed together, and only when every limit allows.

local rpm, tpm, max_inflight = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cost, id, window = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local lease, recovery, ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]) + window

-- Redis 6 needs effects replication before a write that follows TIME (the default from 7).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Forget admissions older than the window, with their tokens.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - window)
if #expired > 0 then
  local freed = 0
  for i = 1, #expired, 500 do
    local batch = {unpack(expired, i, math.min(i + 499, #expired))}
    for _, c in ipairs(redis.call('HMGET', KEYS[2], unpack(batch))) do
      freed = freed + (tonumber(c) or 0)
    end
    redis.call('HDEL', KEYS[2], unpack(batch))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
  redis.call('DECRBY', KEYS[3], freed)
end

local count = redis.call('ZCARD', KEYS[1])
local used = tonumber(redis.call('GET', KEYS[3]) or '0')

-- The adaptive factor climbs back linearly from the last cut.
local factor = 1
local state = redis.call('HMGET', KEYS[6], 'factor', 'cut_at')
if state[1] then
  factor = math.min(1, tonumber(state[1]) + (now - tonumber(state[2])) / recovery)
end
local function scaled(limit)
  if limit <= 0 then return 0 end
  return math.max(1, math.floor(limit * factor))
end
local eff_rpm, eff_tpm = scaled(rpm), scaled(tpm)
local f = math.floor(factor * 1000000)

local function refuse(wait, reason)
  return {0, math.max(1, math.ceil(wait)), reason, count, used, f, now}
end

local pause = tonumber(redis.call('GET', KEYS[5]) or '0')
if pause > now then
  return refuse(pause - now, 'paused')
end

local wait, reason = 0, 'ok'
if eff_rpm > 0 and count + 1 > eff_rpm then
  -- The (count - eff_rpm + 1)-th oldest admission must leave the window first.
  local e = redis.call('ZRANGE', KEYS[1], count - eff_rpm, count - eff_rpm, 'WITHSCORES')
  wait, reason = tonumber(e[2]) + window - now, 'rpm'
end
if eff_tpm > 0 and used + cost > eff_tpm then
  local excess, token_wait, start = used + cost - eff_tpm, window, 0
  while excess > 0 and start < count do
    local batch = redis.call('ZRANGE', KEYS[1], start, start + 199, 'WITHSCORES')
    local ids = {}
    for i = 1, #batch, 2 do ids[#ids + 1] = batch[i] end
    local costs = redis.call('HMGET', KEYS[2], unpack(ids))
    for i = 1, #ids do
      excess = excess - (tonumber(costs[i]) or 0)
      if excess <= 0 then
        token_wait = tonumber(batch[2 * i]) + window - now
        break
      end
    end
    start = start + 200
  end
  if token_wait > wait then wait, reason = token_wait, 'tpm' end
end
if max_inflight > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZCARD', KEYS[4]) >= max_inflight and wait <= 0 then
    -- No telling when a call ends: the caller polls briefly.
    wait, reason = 1, 'inflight'
  end
end
if wait > 0 then
  return refuse(wait, reason)
end

redis.call('ZADD', KEYS[1], now, id)
redis.call('HSET', KEYS[2], id, cost)
redis.call('INCRBY', KEYS[3], cost)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
if max_inflight > 0 then
  redis.call('ZADD', KEYS[4], now + lease, id)
  redis.call('PEXPIRE', KEYS[4], lease + ttl)
end
return {1, 0, 'ok', count + 1, used + cost, f, now}
