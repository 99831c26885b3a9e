-- release.lua: end a permit and take in what the provider's answer said of its limits.
-- Time unit: milliseconds, from Redis TIME.
-- Python side: pipeline/llm/ratelimit/scripts.py (ReleaseKeys, ReleaseArgs, Pushed: the same names,
-- in this order).
--
-- KEYS[1] log      ZSET  permit id -> send time (ms)
-- KEYS[2] inflight ZSET  permit id -> lease expiry (ms)
-- KEYS[3] pace     HASH  requests, tokens = theoretical arrival times (ms)
-- KEYS[4] learned  HASH  rpm, tpm, seen
-- KEYS[5] aimd     HASH  factor, cut_at (ms)
-- KEYS[6] costs    HASH  permit id -> tokens reserved
-- KEYS[7] tokens   STRING sum of costs in the window
-- KEYS[8] retired  ZSET  permit id -> send time, of admissions that left the window (costs kept)
--
-- ARGV[1] permit id           ARGV[2] window (ms)        ARGV[3] recovery (ms)
-- ARGV[4] configured rpm      ARGV[5] configured tpm
-- ARGV[6] x-ratelimit-limit-requests    ARGV[7] x-ratelimit-remaining-requests
-- ARGV[8] x-ratelimit-reset-requests (ms)
-- ARGV[9] x-ratelimit-limit-tokens      ARGV[10] x-ratelimit-remaining-tokens
-- ARGV[11] x-ratelimit-reset-tokens (ms)          (ARGV[6..11]: -1 when the header was absent)
-- ARGV[12] answered: 1 when the provider answered (with or without limit headers), 0 when no
--          answer came back, -1 when the call was never sent (its turn fell inside a pause): then
--          its reservation leaves the window, which would otherwise hold it for a whole window
-- ARGV[13] TTL of what was learned (ms)
-- ARGV[14] tokens the provider charged (-1: unknown, keep the reservation)
-- ARGV[15] learn: 1 = keep what the provider says its limits are (they set or lower ours)
-- ARGV[16] shift (ms) added to Redis TIME; 0 outside tests, which move the clock instead of sleeping
--
-- Returns {pushed requests (ms), pushed tokens (ms), factor * 1e6}.
-- A reservation above what the provider charged (our prompt estimate errs high) is refunded,
-- in the window and in the token pacing.
-- The provider wins: when it says fewer calls or tokens remain than our own window leaves, the
-- pacing moves later by the difference (at most until its reset). After a cut, the factor
-- never stays below the share of the quota the provider says is still free.

local id, window, recovery = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local rpm, tpm = tonumber(ARGV[4]), tonumber(ARGV[5])
local told = {
  {limit = tonumber(ARGV[6]), remaining = tonumber(ARGV[7]), reset = tonumber(ARGV[8]), field = 'requests'},
  {limit = tonumber(ARGV[9]), remaining = tonumber(ARGV[10]), reset = tonumber(ARGV[11]), field = 'tokens'},
}
local answered, learned_ttl, charged = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local learning, shift_ms = tonumber(ARGV[15]) == 1, tonumber(ARGV[16])

redis.call('ZREM', KEYS[2], id)
if answered == -1 then
  local reserved = tonumber(redis.call('HGET', KEYS[6], id) or '0')
  if redis.call('ZREM', KEYS[1], id) == 1 then
    redis.call('HDEL', KEYS[6], id)
    redis.call('DECRBY', KEYS[7], reserved)
  end
end
if answered ~= 1 then return {0, 0, -1} end

if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + shift_ms

-- What the provider says its limits are (nothing when it sends no headers: then `seen` alone
-- ends the one-call-at-a-time probe).
if learning then
  local learn = {'seen', 1}
  if told[1].limit > 0 then learn[#learn + 1] = 'rpm'; learn[#learn + 1] = told[1].limit end
  if told[2].limit > 0 then learn[#learn + 1] = 'tpm'; learn[#learn + 1] = told[2].limit end
  redis.call('HSET', KEYS[4], unpack(learn))
  redis.call('PEXPIRE', KEYS[4], learned_ttl)
end

local factor = 1
local state = redis.call('HMGET', KEYS[5], 'factor', 'cut_at')
if state[1] then
  factor = math.min(1, tonumber(state[1]) + (now - tonumber(state[2])) / recovery)
end

local function in_force(configured, limit)
  if limit > 0 and (configured <= 0 or limit < configured) then return limit end
  return configured
end
local heard = redis.call('HMGET', KEYS[4], 'rpm', 'tpm')
local limits = {in_force(rpm, tonumber(heard[1]) or 0), in_force(tpm, tonumber(heard[2]) or 0)}

local reserved = tonumber(redis.call('HGET', KEYS[6], id) or '-1')
local in_window = redis.call('ZSCORE', KEYS[1], id)
if charged >= 0 and reserved > charged then
  redis.call('HSET', KEYS[6], id, charged)
  if in_window then redis.call('DECRBY', KEYS[7], reserved - charged) end
  local tat = tonumber(redis.call('HGET', KEYS[3], 'tokens') or '-1')
  local eff_tpm = math.max(1, math.floor(limits[2] * factor))
  if limits[2] > 0 and tat > now then
    redis.call('HSET', KEYS[3], 'tokens', math.max(now, tat - (reserved - charged) * window / eff_tpm))
  end
end
-- Our own count to hold against the provider's is the one at this call's send time (its
-- headers describe the window it arrived in), taken over everything sent or reserved since
-- that window began: later calls included, so we never think we have more room than we had.
-- (Comparing stale headers with the current window would push the pacing later whenever the
-- rate fell, and so make it fall further.)
-- Admissions that have left our window since this call's window began are in `retired`: without
-- them our count would miss the call's latency worth of the oldest calls, and whenever the rate
-- falls (the end of a run) the provider would seem to have less room than we think.
local sent_at = tonumber(in_window or redis.call('ZSCORE', KEYS[8], id) or '-1')
local pushed = {0, 0}
local floor = nil
for k = 1, 2 do
  local h, limit = told[k], limits[k]
  if limit > 0 and h.remaining >= 0 and sent_at >= 0 then
    local since = sent_at - window
    local ours
    if k == 1 then
      local sent = redis.call('ZCOUNT', KEYS[1], '(' .. since, '+inf')
      ours = limit * factor - sent - redis.call('ZCOUNT', KEYS[8], '(' .. since, '+inf')
    else
      local used = tonumber(redis.call('GET', KEYS[7]) or '0')
      local function add(ids, sign)
        for i = 1, #ids, 500 do
          for _, c in ipairs(redis.call('HMGET', KEYS[6], unpack(ids, i, math.min(i + 499, #ids)))) do
            used = used + sign * (tonumber(c) or 0)
          end
        end
      end
      add(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', since), -1)
      add(redis.call('ZRANGEBYSCORE', KEYS[8], '(' .. since, '+inf'), 1)
      ours = limit * factor - used
    end
    if h.remaining < ours then
      local push = (ours - h.remaining) * window / limit
      if h.reset >= 0 then push = math.min(push, h.reset) end
      local tat = math.max(tonumber(redis.call('HGET', KEYS[3], h.field) or now), now)
      redis.call('HSET', KEYS[3], h.field, tat + push)
      redis.call('PEXPIRE', KEYS[3], math.ceil(tat + push - now) + window)
      pushed[k] = math.ceil(push)
    end
  end
  if limit > 0 and h.remaining >= 0 and h.limit > 0 then floor = math.min(floor or 1, h.remaining / h.limit) end
end
if state[1] and floor and floor > factor then
  redis.call('HSET', KEYS[5], 'factor', floor, 'cut_at', now)
  factor = floor
end
return {pushed[1], pushed[2], math.floor(factor * 1000000)}
