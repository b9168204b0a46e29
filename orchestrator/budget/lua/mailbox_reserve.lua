-- KEYS: rr (the owner's round-robin counter), rcpt (the recipient domain's sends today in this
--       organization), then per mailbox (day: its sends today, next: when it may send again, ms).
-- ARGV: now, ttl_ms of the day counts, recipient-domain cap (-1: none), mailbox count n, then per
--       mailbox its cap today (the warm-up step, 0: none) and the spacing chosen for this send (ms).
-- Returns {granted, mailbox index (1-based; 0: the default sender), wait_ms, kind}
--         kind: 0 granted, 1 every mailbox with room sent too recently (wait_ms: the soonest),
--               2 every mailbox's day is full, 3 the recipient domain's day is full.
-- One message, counted in the chosen mailbox's day and the recipient domain's, or in none: two
-- workers can never both take a mailbox's last unit, or send inside its spacing.
local now = clock(ARGV[1])
local ttl, rcap, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if rcap >= 0 and (tonumber(redis.call('GET', KEYS[2])) or 0) >= rcap then return {0, 0, 0, 3} end
local chosen, soonest = 0, -1
if n > 0 then
  local start = redis.call('INCR', KEYS[1])
  redis.call('PEXPIRE', KEYS[1], ttl)
  for k = 0, n - 1 do
    local i = (start + k) % n
    local cap = tonumber(ARGV[5 + 2 * i])
    if (tonumber(redis.call('GET', KEYS[3 + 2 * i])) or 0) < cap then
      local wait = (tonumber(redis.call('GET', KEYS[4 + 2 * i])) or 0) - now
      if wait <= 0 then
        chosen = i + 1
        break
      end
      if soonest < 0 or wait < soonest then soonest = wait end
    end
  end
  if chosen == 0 then
    if soonest < 0 then return {0, 0, 0, 2} end
    return {0, 0, soonest, 1}
  end
  local i = chosen - 1
  redis.call('INCR', KEYS[3 + 2 * i])
  redis.call('PEXPIRE', KEYS[3 + 2 * i], ttl)
  redis.call('SET', KEYS[4 + 2 * i], int(now + tonumber(ARGV[6 + 2 * i])), 'PX', ttl)
end
if rcap >= 0 then
  redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1, chosen, 0, 0}
