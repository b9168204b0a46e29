-- One scope's bucket brought up to `now` (nothing written). A missing bucket is full.
-- Its 9 ARGV from `at`: capacity r/t, configured limit r/t, AIMD step r/t, refill denominator
-- (0: paced, 60000 + the margin in force), margin floor and cap.
local function bucket(bucket_key, rate_key, argv, at, interval, now)
  local b = {cap_r = tonumber(argv[at]), cap_t = tonumber(argv[at + 1])}
  b.lim_r, b.lim_t, b.blocked = limits(rate_key, tonumber(argv[at + 2]), tonumber(argv[at + 3]),
                                       tonumber(argv[at + 4]), tonumber(argv[at + 5]), interval, now)
  b.margin = margin(rate_key, tonumber(argv[at + 7]), tonumber(argv[at + 8]))
  local den = tonumber(argv[at + 6])
  if den == 0 then den = WINDOW + b.margin end  -- paced: refill at what the pacer passes
  b.rate_r, b.rate_t = math.floor(b.lim_r * WINDOW / den), math.floor(b.lim_t * WINDOW / den)
  local v = redis.call('HMGET', bucket_key, 'r', 't', 'ts')
  local ts = tonumber(v[3])
  if not ts then
    b.r, b.t, b.ts = b.cap_r, b.cap_t, now
  else
    local dt = math.max(0, now - ts)
    b.r = math.min(b.cap_r, tonumber(v[1]) + dt * b.rate_r)
    b.t = math.min(b.cap_t, tonumber(v[2]) + dt * b.rate_t)
    b.ts = math.max(ts, now)  -- never move a bucket's clock back: that would refill twice
  end
  return b
end

local function fill_ms(level, cap, rate)
  if rate <= 0 then return 3600000 end
  return math.ceil((cap - level) / rate)
end

local function store(bucket_key, b)
  redis.call('HSET', bucket_key, 'r', int(b.r), 't', int(b.t), 'ts', int(b.ts))
  -- A bucket left alone refills to full, and a missing bucket reads as full: let an idle one
  -- go once it is surely full (twice the refill time, in case the rate is cut meanwhile).
  local idle = math.max(fill_ms(b.r, b.cap_r, b.rate_r), fill_ms(b.t, b.cap_t, b.rate_t))
  redis.call('PEXPIRE', bucket_key, int(2 * idle + WINDOW))
end

local function wait_for(deficit, rate)
  if deficit <= 0 then return 0 end
  if rate <= 0 then return WINDOW end
  return math.ceil(deficit / rate)
end
