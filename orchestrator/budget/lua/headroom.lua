-- KEYS: (bucket, rate) per scope of each set of scopes, the sets one after another.
-- ARGV: now, interval, the number of sets n, each set's number of scopes, then 9 per scope.
-- Read-only. Returns per set its tightest scope's
-- {units r, units t, rate r, rate t, limit r, limit t, blocked ms, now}: a dispatch cycle reads
-- every capped organization it judges in one call.
local now = clock(ARGV[1])
local interval = tonumber(ARGV[2])
local sets = tonumber(ARGV[3])
local rooms, scope = {}, 0
for s = 1, sets do
  local h
  for _ = 1, tonumber(ARGV[3 + s]) do
    scope = scope + 1
    local b = bucket(KEYS[2 * scope - 1], KEYS[2 * scope], ARGV, 4 + sets + (scope - 1) * 9, interval, now)
    local row = {b.r, b.t, b.rate_r, b.rate_t, b.lim_r, b.lim_t, math.max(0, b.blocked - now), now}
    if h then
      for k = 1, 6 do h[k] = math.min(h[k], row[k]) end
      h[7] = math.max(h[7], row[7])
    else
      h = row
    end
  end
  rooms[s] = h
end
return rooms
