-- KEYS: res, exp, then (bucket, rate) per scope.
-- ARGV: now, count, requests_each, tokens (one figure for every job, or one per job in order,
-- comma-separated), ttl_ms, id_head, id_tail, interval, 9 per scope.
-- Grants the longest run of jobs, in order, that every bucket fits.
-- Returns {granted, wait_ms, scope index, kind (1 requests, 2 tokens, 3 retry-after), now}.
local now = clock(ARGV[1])
local res, exp = KEYS[1], KEYS[2]
sweep(res, exp, now, 32)
local count, req = tonumber(ARGV[2]), tonumber(ARGV[3])
local toks = {}
for figure in string.gmatch(ARGV[4], '[^,]+') do toks[#toks + 1] = tonumber(figure) end
-- size[k]: the k-th job's tokens (one figure: every job's); need_t[k]: the first k jobs' (UNITS)
local size, need_t = {}, {[0] = 0}
for k = 1, count do
  size[k] = toks[k] or toks[1]
  need_t[k] = need_t[k - 1] + size[k] * UNITS
end
local need_r, interval = req * UNITS, tonumber(ARGV[8])
local buckets, grant = {}, count
for i = 1, (#KEYS - 2) / 2 do
  local b = bucket(KEYS[1 + 2 * i], KEYS[2 + 2 * i], ARGV, 9 + (i - 1) * 9, interval, now)
  buckets[i] = b
  if b.blocked > now then grant = 0 end
  if need_r > 0 then grant = math.min(grant, math.floor(b.r / need_r)) end
  while grant > 0 and need_t[grant] > 0 and need_t[grant] > b.t do grant = grant - 1 end
end
grant = math.max(0, grant)
local wait, wscope, wkind = 0, 0, 0
if grant < count then
  for i, b in ipairs(buckets) do
    local waits = {wait_for((grant + 1) * need_r - b.r, b.rate_r),
                   wait_for(need_t[grant + 1] - b.t, b.rate_t), b.blocked - now}
    for kind = 1, 3 do
      if waits[kind] > wait then wait, wscope, wkind = waits[kind], i, kind end
    end
  end
end
if grant > 0 then
  for i, b in ipairs(buckets) do
    b.r, b.t = b.r - grant * need_r, b.t - need_t[grant]
    store(KEYS[1 + 2 * i], b)
  end
  local expires, head, tail = int(now + tonumber(ARGV[5])), ARGV[6], ARGV[7]
  local prefix, record = int(req) .. ':', {}  -- a record per distinct size: jobs share a few
  local j = 1
  while j <= grant do
    local fields, members, n = {}, {}, 0
    for k = j, math.min(grant, j + 199) do  -- chunks: unpack() has a stack limit
      local id = head .. k .. tail  -- k is a small whole number: written exactly
      local s = size[k]
      local r = record[s]
      if r == nil then r = prefix .. int(s); record[s] = r end
      fields[n + 1], fields[n + 2] = id, r
      members[n + 1], members[n + 2] = expires, id
      n = n + 2
    end
    redis.call('HSET', res, unpack(fields))
    redis.call('ZADD', exp, unpack(members))
    j = j + 200
  end
end
return {grant, wait, wscope, wkind, now}
