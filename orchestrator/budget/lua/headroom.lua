-- KEYS: (bucket, rate) per scope. ARGV: now, interval, 9 per scope. Read-only.
-- Returns the tightest scope's {units r, units t, rate r, rate t, limit r, limit t, blocked ms, now}.
local now = clock(ARGV[1])
local interval = tonumber(ARGV[2])
local h
for i = 1, #KEYS / 2 do
  local b = bucket(KEYS[2 * i - 1], KEYS[2 * i], ARGV, 3 + (i - 1) * 9, interval, now)
  local row = {b.r, b.t, b.rate_r, b.rate_t, b.lim_r, b.lim_t, math.max(0, b.blocked - now), now}
  if h then
    for k = 1, 6 do h[k] = math.min(h[k], row[k]) end
    h[7] = math.max(h[7], row[7])
  else
    h = row
  end
end
return h
