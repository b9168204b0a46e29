-- KEYS: res, exp, then (bucket, rate, log, meta) per scope.
-- ARGV: now, interval, 9 bucket parameters per scope. Drops expired reservations; returns JSON.
-- Outstanding totals are summed here, O(reservations in flight), rather than kept up to date
-- on every reserve and settle: the hot path stays short and this is a dashboard's call.
local now = clock(ARGV[1])
local interval = tonumber(ARGV[2])
while sweep(KEYS[1], KEYS[2], now, 1000) == 1000 do end
local out_r, out_t = 0, 0
local recs = redis.call('HVALS', KEYS[1])
for _, rec in ipairs(recs) do
  local rq, tk = string.match(rec, '^(%d+):(%d+)$')
  out_r, out_t = out_r + tonumber(rq), out_t + tonumber(tk)
end
local snap = {now_ms = now, outstanding_requests = out_r, outstanding_tokens = out_t, in_flight = #recs, scopes = {}}
for i = 1, (#KEYS - 2) / 4 do
  local k = 2 + (i - 1) * 4
  local b = bucket(KEYS[k + 1], KEYS[k + 2], ARGV, 3 + (i - 1) * 9, interval, now)
  local window = WINDOW + b.margin
  local r = redis.call('HMGET', KEYS[k + 2], 'last_429', 'report', 'report_ms', 'answered_429')
  local m = redis.call('HMGET', KEYS[k + 4], 'cum', 'base')
  local f = redis.call('HMGET', KEYS[k + 2], 'foreign_r', 'foreign_t')
  local cum, base = tonumber(m[1]) or 0, tonumber(m[2]) or 0
  snap.scopes[i] = {
    limit_rpm = b.lim_r, limit_tpm = b.lim_t, requests_per_min = b.rate_r, tokens_per_min = b.rate_t,
    available_requests = b.r / UNITS, available_tokens = b.t / UNITS, blocked_ms = math.max(0, b.blocked - now),
    calls_in_window = redis.call('ZCOUNT', KEYS[k + 3], '(' .. int(now - window), '+inf'),
    tokens_in_window = cum - cum_at(KEYS[k + 3], base, now - window),
    last_429_ms = tonumber(r[1]), answered_429 = tonumber(r[4]) or 0, last_report = r[2] or nil, last_report_ms = tonumber(r[3]),
    margin_ms = b.margin, foreign_requests = f[1] and tonumber(f[1]) / 1000 or nil,
    foreign_tokens = f[2] and tonumber(f[2]) / 1000 or nil,
  }
end
return cjson.encode(snap)
