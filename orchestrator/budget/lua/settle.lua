-- KEYS: res, exp, then (bucket, rate) per scope.
-- ARGV: now, id, refund ('1' or '0'), used_requests ('' = as reserved), used_tokens, interval,
--       9 per scope.
-- Returns 1 done, 0 unknown (or already settled/refunded/swept), -1 expired (nothing given back).
local now = clock(ARGV[1])
local res, exp, id = KEYS[1], KEYS[2], ARGV[2]
local expires = tonumber(redis.call('ZSCORE', exp, id))
if not expires then return 0 end
local rec = redis.call('HGET', res, id)
redis.call('ZREM', exp, id)
redis.call('HDEL', res, id)
if expires <= now or not rec then return -1 end
local rq, tk = string.match(rec, '^(%d+):(%d+)$')
local back_r, back_t = tonumber(rq), tonumber(tk)
if ARGV[3] ~= '1' then
  back_r = 0
  if ARGV[4] ~= '' then back_r = tonumber(rq) - tonumber(ARGV[4]) end
  back_t = tonumber(tk) - tonumber(ARGV[5])  -- negative: more was used than reserved, charge it
end
local interval = tonumber(ARGV[6])
for i = 1, (#KEYS - 2) / 2 do
  local key = KEYS[1 + 2 * i]
  local b = bucket(key, KEYS[2 + 2 * i], ARGV, 7 + (i - 1) * 9, interval, now)
  b.r = math.min(b.cap_r, b.r + back_r * UNITS)
  b.t = math.min(b.cap_t, b.t + back_t * UNITS)
  store(key, b)
end
return 1
