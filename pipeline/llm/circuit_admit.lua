-- circuit_admit.lua: may a call go to the endpoint now? Read-only but for taking the probe.
-- Time unit: milliseconds, from Redis TIME (one clock for every worker).
--
-- KEYS[1] state  HASH   failures (consecutive, while closed), opened_ms, probe_at_ms, probes
--                       (failed since it opened), last_error
-- KEYS[2] probe  STRING the token of the call probing the open endpoint, PX its lease
--
-- ARGV[1] token            ARGV[2] probe lease (ms): the probe's limiter wait and HTTP timeout
-- ARGV[3] poll (ms): how soon to look again while another call's probe is out
-- ARGV[4] shift (ms) added to TIME: 0 but in tests, which move the clock instead of sleeping
--
-- Returns {verdict, wait_ms, opened_ms, now_ms, probes, failures, last_error}
--   verdict 0: closed, go (failures: the consecutive failures counted so far)
--           1: open, and this call is the probe: go
--           2: open: wait wait_ms (until the next probe is due, or a poll while one is out)

local token, lease_ms, poll_ms, shift_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

-- Redis 6 needs effects replication before a write that follows TIME (the default from 7).
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + shift_ms

local s = redis.call('HMGET', KEYS[1], 'opened_ms', 'probe_at_ms', 'probes', 'failures', 'last_error')
if not s[1] then
  return {0, 0, 0, now, 0, tonumber(s[4] or '0'), ''}
end
local opened, probe_at, probes = tonumber(s[1]), tonumber(s[2] or '0'), tonumber(s[3] or '0')
local last_error = s[5] or ''
if now < probe_at then
  return {2, probe_at - now, opened, now, probes, 0, last_error}
end
if redis.call('SET', KEYS[2], token, 'NX', 'PX', lease_ms) then
  return {1, 0, opened, now, probes, 0, last_error}
end
local left = redis.call('PTTL', KEYS[2])
if left < 1 then left = 1 end
return {2, math.min(poll_ms, left), opened, now, probes, 0, last_error}
