-- circuit_outcome.lua: what became of a call the circuit let through.
-- Time unit: milliseconds, from Redis TIME.
--
-- KEYS[1] state  HASH   (as in circuit_admit.lua) and, once an outage ended: closed_ms,
--                       last_opened_ms, last_probes; for the metrics: endpoint (its label),
--                       outages (how many opened), held_calls and held_ms (Circuit.count_held)
-- KEYS[2] probe  STRING the probing call's token
--
-- ARGV[1] outcome: answered | failed | abandoned
--         answered: the endpoint answered (anything but a 5xx or a 429): the circuit closes,
--                 unless the call was let through before it opened (an answer to a request
--                 sent before the outage says nothing of the endpoint now: the probe decides);
--                 while closed it resets the failures, unless the call was let through before
--                 the latest failure (a provider that goes down still answers what it took
--                 before: those answers must not hold the circuit closed while calls retry)
--         failed: no answer (connection failure, timeout) or a 5xx: counted while closed, the
--                 probe's failure spaces the next probe further; a failure of a call let through
--                 before the circuit last closed changes nothing (it timed out over the outage
--                 the probe has ended: counting it would re-open a circuit that just closed)
--         abandoned: the call never reached the endpoint, or a 429 (the limiter's business):
--                 a probe gives its turn to the next call, nothing is counted
-- ARGV[2] token            ARGV[3] failures that open it
-- ARGV[4] first probe spacing (ms)   ARGV[5] longest probe spacing (ms)
-- ARGV[6] key TTL (ms), from the last outcome   ARGV[7] the error, in words
-- ARGV[8] shift (ms) added to TIME: 0 but in tests
-- ARGV[9] when the call was let through (ms, circuit_admit.lua's now)
-- ARGV[10] the endpoint's label (scheme, host, port, path: no credentials), for the metrics
-- ARGV[11] the request's fingerprint (the same request retried or redelivered has the same):
--         failures of one request alone never open the circuit (that request is bad, not the
--         endpoint: it spends its own tries), and a probe failed by the request that failed the
--         probe before it counts as that request's own failure (`repeats`). State fields:
--         streak_req, streak_mixed (the requests of the current count), probe_req,
--         probe_req_fails (the last failed probe's request, its failed probes in a row)
--
-- Returns {open (0/1), opened_ms, probes, now_ms, probe_at_ms, failures, changed, repeats}
--   changed 1: this outcome opened (or closed) the circuit; opened_ms and probes of a circuit
--   it closed are those of the outage that ended
--   repeats: the probes this call's request failed in a row (0: it failed no probe)

local outcome, token = ARGV[1], ARGV[2]
local threshold, base_ms, max_ms = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl_ms, error_text, shift_ms = tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8])
local admitted_ms, label, request = tonumber(ARGV[9]), ARGV[10], ARGV[11]

if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + shift_ms

local held = redis.call('GET', KEYS[2]) == token
local s = redis.call('HMGET', KEYS[1], 'opened_ms', 'probe_at_ms', 'probes', 'failures', 'last_error_ms',
  'closed_ms', 'probe_req', 'probe_req_fails', 'streak_req', 'streak_mixed')
local opened, probe_at = tonumber(s[1] or '0'), tonumber(s[2] or '0')
local probes, failures = tonumber(s[3] or '0'), tonumber(s[4] or '0')
local last_error, closed = tonumber(s[5] or '0'), tonumber(s[6] or '0')

if outcome == 'abandoned' then
  if held then redis.call('DEL', KEYS[2]) end
  return {opened > 0 and 1 or 0, opened, probes, now, probe_at, failures, 0, 0}
end

if outcome == 'answered' then
  if opened > 0 and not held and admitted_ms <= opened then
    return {1, opened, probes, now, probe_at, failures, 0, 0}
  end
  if opened == 0 and failures > 0 and admitted_ms < last_error then
    return {0, 0, 0, now, 0, failures, 0, 0}
  end
  local changed = 0
  if opened > 0 then
    redis.call('HSET', KEYS[1], 'closed_ms', now, 'last_opened_ms', opened, 'last_probes', probes)
    redis.call('HDEL', KEYS[1], 'opened_ms', 'probe_at_ms', 'probes', 'probe_req', 'probe_req_fails')
    changed = 1
  end
  if failures > 0 or changed == 1 then
    redis.call('HSET', KEYS[1], 'failures', 0)
    redis.call('PEXPIRE', KEYS[1], ttl_ms)
  end
  redis.call('DEL', KEYS[2])
  return {0, opened, probes, now, 0, 0, changed, 0}
end

-- failed
if opened == 0 and admitted_ms < closed then
  return {0, 0, 0, now, 0, failures, 0, 0}
end
redis.call('HSET', KEYS[1], 'last_error', error_text, 'last_error_ms', now, 'endpoint', label)
redis.call('PEXPIRE', KEYS[1], ttl_ms)
if opened > 0 then
  local repeats = 0
  if held then
    probes = probes + 1
    probe_at = now + math.floor(math.min(max_ms, base_ms * 2 ^ probes))
    repeats = 1
    if s[7] == request then repeats = tonumber(s[8] or '0') + 1 end
    redis.call('HSET', KEYS[1], 'probes', probes, 'probe_at_ms', probe_at, 'probe_req', request,
      'probe_req_fails', repeats)
    redis.call('DEL', KEYS[2])
  end
  return {1, opened, probes, now, probe_at, failures, 0, repeats}
end
failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
local mixed = s[10] == '1'
if failures == 1 or not s[9] then
  redis.call('HSET', KEYS[1], 'streak_req', request, 'streak_mixed', 0)
  mixed = false
elseif not mixed and s[9] ~= request then
  redis.call('HSET', KEYS[1], 'streak_mixed', 1)
  mixed = true
end
if failures < threshold or not mixed then
  return {0, 0, 0, now, 0, failures, 0, 0}
end
probe_at = now + math.min(max_ms, base_ms)
redis.call('HSET', KEYS[1], 'opened_ms', now, 'probe_at_ms', probe_at, 'probes', 0)
redis.call('HDEL', KEYS[1], 'probe_req', 'probe_req_fails')
redis.call('HINCRBY', KEYS[1], 'outages', 1)
redis.call('DEL', KEYS[2])
return {1, now, 0, now, probe_at, failures, 1, 0}
