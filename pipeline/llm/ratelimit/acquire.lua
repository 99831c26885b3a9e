-- acquire.lua: reserve a send time for one LLM call, paced by a GCRA (leaky bucket) over requests
-- and tokens, bounded by a sliding-window log of both, an in-flight cap and a shared pause.
-- Time unit: milliseconds, from Redis TIME (never the caller's clock).
-- Python side: pipeline/llm/ratelimit/scripts.py (AcquireKeys, AcquireArgs, Decision: the same
-- names, in this order).
--
-- One script, because one decision needs all of it at once: the send time must be computed from
-- the window, the pacing, the pause, the probe and the in-flight count as they are, and recorded
-- in the same step, or two workers would take the same slot. What changes those inputs lives in
-- the other scripts: pause.lua sets the pause and cuts the factor after a 429, release.lua learns
-- the provider's limits from its headers; here they are only read. Each concern below is one
-- local function, called in order by the main block at the end.
--
-- KEYS[1] log      ZSET  permit id -> send time (ms; may lie in the near future)
-- KEYS[2] costs    HASH  permit id -> tokens reserved
-- KEYS[3] tokens   STRING sum of costs of the permits in the window
-- KEYS[4] inflight ZSET  permit id -> lease expiry (ms)
-- KEYS[5] pause    STRING shared "pause until" (ms), set by pause.lua after a 429
-- KEYS[6] aimd     HASH  factor = share of the limits in force after the last cut, cut_at (ms)
-- KEYS[7] pace     HASH  requests, tokens = theoretical arrival times (ms) of the two GCRAs
-- KEYS[8] learned  HASH  rpm, tpm (the provider's x-ratelimit-limit-*), seen (an answer came back),
--                        probe (ms: until when the first call goes alone)
-- KEYS[9] retired  ZSET  permit id -> send time, of admissions that left the window, kept (with
--                        their costs) `keep` ms longer: release.lua compares the provider's count
--                        at a call's arrival with ours over the window before it
--
-- ARGV[1] configured rpm (0: none)   ARGV[2] configured tpm (0: none)
-- ARGV[3] max in flight (0: none)    ARGV[4] cost in tokens          ARGV[5] permit id
-- ARGV[6] window (ms)                ARGV[7] lease (ms)              ARGV[8] recovery (ms, a cut back to 1)
-- ARGV[9] key TTL beyond the window (ms)
-- ARGV[10] burst (ms of quota that may go at once; -1: no pacing, the window alone)
-- ARGV[11] longest wait to reserve (ms): a later send time is refused, not reserved
-- ARGV[12] learn: 1 = the provider's limits set or lower ours; with nothing configured or learned
--          yet, one call at a time until an answer tells whether the provider sends limits
-- ARGV[13] probe (ms): how long that one call holds the others back at most
-- ARGV[14] keep (ms): how long admissions that left the window stay in `retired`
-- ARGV[15] shift (ms) added to Redis TIME; 0 outside tests, which move the clock instead of sleeping
--
-- Returns {admitted 0/1, wait ms, reason, requests in window, tokens in window, factor * 1e6,
--          now (ms), rpm in force, tpm in force, heard 0/1 (an answer has said what the
--          provider's limits are, or that it states none)}.
-- Admitted: the call is recorded at now + wait and must not be sent before then; reason says what
-- set that time ('ok': nothing, 'rpm'/'tpm': the pacing, 'rpm window'/'tpm window': the window). Refused: nothing
-- is recorded; wait says when to ask again. Requests and tokens are committed together.

local rpm, tpm, max_inflight = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cost, id, window = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local lease, recovery, ttl = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]) + window
local burst, max_wait, learn = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local probe, keep, shift_ms = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local LOG, COSTS, TOKENS, INFLIGHT = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local PAUSE, AIMD, PACE, LEARNED, RETIRED = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]

-- Redis 6 needs effects replication before a write that follows TIME (the default from 7).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + shift_ms

-- The window's upkeep: admissions older than the window leave it, with their tokens, for
-- `retired`; those retired longer than `keep` are forgotten.
local function expire_window()
  local expired = redis.call('ZRANGEBYSCORE', LOG, '-inf', now - window, 'WITHSCORES')
  if #expired > 0 then
    local freed = 0
    for i = 1, #expired, 1000 do
      local ids, moved = {}, {}
      for j = i, math.min(i + 999, #expired), 2 do
        ids[#ids + 1] = expired[j]
        moved[#moved + 1] = expired[j + 1]
        moved[#moved + 1] = expired[j]
      end
      for _, c in ipairs(redis.call('HMGET', COSTS, unpack(ids))) do
        freed = freed + (tonumber(c) or 0)
      end
      redis.call('ZADD', RETIRED, unpack(moved))
    end
    redis.call('ZREMRANGEBYSCORE', LOG, '-inf', now - window)
    redis.call('DECRBY', TOKENS, freed)
    redis.call('PEXPIRE', RETIRED, keep + ttl)
  end
  local forgotten = redis.call('ZRANGEBYSCORE', RETIRED, '-inf', now - window - keep)
  for i = 1, #forgotten, 500 do
    redis.call('HDEL', COSTS, unpack(forgotten, i, math.min(i + 499, #forgotten)))
  end
  if #forgotten > 0 then redis.call('ZREMRANGEBYSCORE', RETIRED, '-inf', now - window - keep) end
end

-- The provider's own figures (release.lua keeps them): they set a limit nobody configured, and
-- lower one set too high. Returns the limits in force, whether an answer has been heard, and
-- whether this call would be the probe: with nothing configured or learned yet, one call goes
-- alone and its answer tells everyone the limits.
local function limits_in_force()
  local learned = redis.call('HMGET', LEARNED, 'rpm', 'tpm', 'seen')
  local function in_force(configured, told)
    told = tonumber(told) or 0
    if told > 0 and (configured <= 0 or told < configured) then return told end
    return configured
  end
  local rpm_now, tpm_now = rpm, tpm
  if learn == 1 then rpm_now, tpm_now = in_force(rpm, learned[1]), in_force(tpm, learned[2]) end
  local probing = learn == 1 and rpm_now <= 0 and tpm_now <= 0 and not learned[3]
  return rpm_now, tpm_now, learned[3] and 1 or 0, probing
end

-- The adaptive factor (pause.lua cuts it): it climbs back linearly from the last cut.
local function adaptive_factor()
  local state = redis.call('HMGET', AIMD, 'factor', 'cut_at')
  if state[1] then
    return math.min(1, tonumber(state[1]) + (now - tonumber(state[2])) / recovery)
  end
  return 1
end

-- The probe is claimed for `probe` ms, not for its whole lease: a worker killed mid-probe holds
-- the others back that long at most, and a slow probe lets one more go. Returns a refusal's
-- wait, or nil when this call is the probe.
local function claim_probe()
  local probe_until = tonumber(redis.call('HGET', LEARNED, 'probe') or '0')
  if probe_until > now then
    return math.min(probe_until - now, 100)  -- the answer may come any moment
  end
  redis.call('HSET', LEARNED, 'probe', now + probe)
  redis.call('PEXPIRE', LEARNED, probe + ttl)
  return nil
end

-- Whether the in-flight cap leaves room (expired leases are dropped first).
local function inflight_room()
  redis.call('ZREMRANGEBYSCORE', INFLIGHT, '-inf', now)
  return redis.call('ZCARD', INFLIGHT) < max_inflight
end

-- Pacing: each GCRA lets a call go at its theoretical arrival time less the burst allowance.
-- Returns the send time, its reason and the two theoretical arrival times.
local function paced_time(eff_rpm, eff_tpm)
  local at, reason = now, 'ok'
  local pace = redis.call('HMGET', PACE, 'requests', 'tokens')
  local tat_requests = math.max(tonumber(pace[1]) or now, now)
  local tat_tokens = math.max(tonumber(pace[2]) or now, now)
  if burst >= 0 then
    if eff_rpm > 0 and tat_requests - burst > at then at, reason = tat_requests - burst, 'rpm' end
    if eff_tpm > 0 and tat_tokens - burst > at then at, reason = tat_tokens - burst, 'tpm' end
  end
  return at, reason, tat_requests, tat_tokens
end

-- The window: no `window` ms ever holds more than the limits, whatever the pacing allowed. It
-- holds the limits themselves: a cut slows the pacing, it does not stall calls until a fuller
-- window drains. Without pacing the window is all there is, and a cut lowers it. Returns the
-- send time moved later where the window is full, and its reason.
local function window_time(at, reason, count, used, win_rpm, win_tpm)
  if win_rpm > 0 and count + 1 > win_rpm then
    -- The (count - win_rpm + 1)-th oldest admission must leave the window first.
    local e = redis.call('ZRANGE', LOG, count - win_rpm, count - win_rpm, 'WITHSCORES')
    local free_at = tonumber(e[2]) + window
    if free_at > at then at, reason = free_at, 'rpm window' end
  end
  local token_cap = math.max(win_tpm, cost)  -- a cut may leave one big call alone in a window
  if win_tpm > 0 and used + cost > token_cap then
    local excess, free_at, start = used + cost - token_cap, now + window, 0
    while excess > 0 and start < count do
      local batch = redis.call('ZRANGE', LOG, start, start + 199, 'WITHSCORES')
      local ids = {}
      for i = 1, #batch, 2 do ids[#ids + 1] = batch[i] end
      local costs = redis.call('HMGET', COSTS, unpack(ids))
      for i = 1, #ids do
        excess = excess - (tonumber(costs[i]) or 0)
        if excess <= 0 then
          free_at = tonumber(batch[2 * i]) + window
          break
        end
      end
      start = start + 200
    end
    if free_at > at then at, reason = free_at, 'tpm window' end
  end
  return at, reason
end

-- The reservation: the call in the window at `at`, its tokens, its lease, and the pacing moved on.
local function record(at, eff_rpm, eff_tpm, tat_requests, tat_tokens)
  redis.call('ZADD', LOG, at, id)
  redis.call('HSET', COSTS, id, cost)
  redis.call('INCRBY', TOKENS, cost)
  if burst >= 0 and (eff_rpm > 0 or eff_tpm > 0) then
    -- When one limit set the send time, the other does not forfeit the time the call waited
    -- for it, up to one interval of the first: a small call held by the request pacing would
    -- otherwise throw away token time (and a big call held by the tokens, request time).
    local requests_next, tokens_next = tat_requests, tat_tokens
    local request_interval = eff_rpm > 0 and window / eff_rpm or 0
    local token_interval = eff_tpm > 0 and window * cost / eff_tpm or 0
    if eff_rpm > 0 then requests_next = math.max(tat_requests, at - token_interval) + request_interval end
    if eff_tpm > 0 then tokens_next = math.max(tat_tokens, at - request_interval) + token_interval end
    redis.call('HSET', PACE, 'requests', requests_next, 'tokens', tokens_next)
    redis.call('PEXPIRE', PACE, math.ceil(math.max(requests_next, tokens_next) - now) + ttl)
  end
  redis.call('PEXPIRE', LOG, math.ceil(at - now) + ttl)
  redis.call('PEXPIRE', COSTS, math.ceil(at - now) + ttl + keep)  -- costs outlive the window in `retired`
  redis.call('PEXPIRE', TOKENS, math.ceil(at - now) + ttl)
  if max_inflight > 0 then
    redis.call('ZADD', INFLIGHT, at + lease, id)
    redis.call('PEXPIRE', INFLIGHT, math.ceil(at - now) + lease + ttl)
  end
end

-- The decision, in order: refusals first (nothing recorded), then the send time, then the record.
expire_window()
local count = redis.call('ZCARD', LOG)
local used = tonumber(redis.call('GET', TOKENS) or '0')
local heard, probing
rpm, tpm, heard, probing = limits_in_force()
local factor = adaptive_factor()
local function scaled(limit)
  if limit <= 0 then return 0 end
  return math.max(1, math.floor(limit * factor))
end
local eff_rpm, eff_tpm = scaled(rpm), scaled(tpm)
local f = math.floor(factor * 1000000)

local function refuse(wait, reason)
  return {0, math.max(1, math.ceil(wait)), reason, count, used, f, now, rpm, tpm, heard}
end

if tpm > 0 and cost > tpm then
  return refuse(window, 'too_large')
end
local pause = tonumber(redis.call('GET', PAUSE) or '0')
if pause > now then
  return refuse(pause - now, 'paused')
end
if probing then
  local wait = claim_probe()
  if wait then return refuse(wait, 'probing') end
end
if max_inflight > 0 and not inflight_room() then
  return refuse(1, 'inflight')  -- no telling when a call ends: the caller polls briefly
end

local at, reason, tat_requests, tat_tokens = paced_time(eff_rpm, eff_tpm)
local win_rpm, win_tpm = rpm, tpm
if burst < 0 then win_rpm, win_tpm = eff_rpm, eff_tpm end
at, reason = window_time(at, reason, count, used, win_rpm, win_tpm)
if at - now > max_wait then
  return refuse(at - now, reason)
end
record(at, eff_rpm, eff_tpm, tat_requests, tat_tokens)
return {1, math.ceil(at - now), reason, count + 1, used + cost, f, now, rpm, tpm, heard}
