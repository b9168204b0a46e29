-- KEYS: res, exp, then (bucket, rate) per scope.
-- ARGV: now, ttl_ms, id_head, interval, the number of sets of scopes n, each set's scope indices
-- ("1.3") and id tail ("@dep:a,org:7"), 9 per scope, then the jobs: a job's draws separated by
-- ';', jobs by ','; a draw "set:requests:tokens", one reservation.
-- Walks the jobs in order: a job gets every draw or none. A scope that cannot fit a job refuses
-- every later job drawing from it (the room the refused one waits for stays for it); jobs on
-- other scopes go on.
-- Returns {now, per job 0 (granted) or the index of the scope that stopped it, per scope the
-- kind (1 requests, 2 tokens, 3 retry-after; 0: it refused none) and wait_ms of its refusal}.
local now = clock(ARGV[1])
local res, exp = KEYS[1], KEYS[2]
sweep(res, exp, now, 32)
local ttl, head, interval, nsets = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local sets, tails = {}, {}
for s = 1, nsets do
  local members = {}
  for i in string.gmatch(ARGV[4 + 2 * s], '%d+') do members[#members + 1] = tonumber(i) end
  sets[s], tails[s] = members, ARGV[5 + 2 * s]
end
local at, nscopes = 6 + 2 * nsets, (#KEYS - 2) / 2
local buckets, changed, refusals = {}, {}, {}
for i = 1, nscopes do
  buckets[i] = bucket(KEYS[1 + 2 * i], KEYS[2 + 2 * i], ARGV, at + (i - 1) * 9, interval, now)
  refusals[2 * i - 1], refusals[2 * i] = 0, 0
end
local expires, stops, fields, members, n = int(now + ttl), {}, {}, {}, 0
local function flush()
  if n > 0 then
    redis.call('HSET', res, unpack(fields))
    redis.call('ZADD', exp, unpack(members))
    fields, members, n = {}, {}, 0
  end
end
local function short(i, nr, nt)
  local b = buckets[i]
  return b.blocked > now or (nr > 0 and nr > b.r) or (nt > 0 and nt > b.t)
end
-- Reused by every job (a cycle's 500 allocate nothing): what it needs of each scope it names,
-- those scopes in order, and each draw's set and record ("requests:tokens", as Python wrote it).
local need_r, need_t, order, dset, drec = {}, {}, {}, {}, {}
for i = 1, nscopes do need_r[i], need_t[i] = -1, 0 end  -- -1: not named by this job
local k, nd, no, stop = 1, 0, 0, 0
-- One pass over the draws; the separator after each says whether its job goes on (';').
for s, record, r, t, more in string.gmatch(ARGV[at + 9 * nscopes], '(%d+):((%d+):(%d+))(;?)') do
  s, r, t = tonumber(s), tonumber(r) * UNITS, tonumber(t) * UNITS
  nd = nd + 1
  dset[nd], drec[nd] = s, record
  local set = sets[s]
  for x = 1, #set do
    local i = set[x]
    if stop == 0 and refusals[2 * i - 1] > 0 then stop = i end
    if need_r[i] < 0 then
      no = no + 1
      order[no], need_r[i], need_t[i] = i, r, t
    else
      need_r[i], need_t[i] = need_r[i] + r, need_t[i] + t
    end
  end
  if more == '' then  -- the job's last draw: grant it whole, or refuse it
    if stop == 0 then
      local fits = true
      for o = 1, no do
        local i = order[o]
        if short(i, need_r[i], need_t[i]) then fits = false; break end
      end
      if fits then
        for o = 1, no do
          local i = order[o]
          local b = buckets[i]
          b.r, b.t, changed[i] = b.r - need_r[i], b.t - need_t[i], true
        end
        for d = 1, nd do
          local id = head .. k .. tails[dset[d]]  -- k is a small whole number: written exactly
          fields[n + 1], fields[n + 2] = id, drec[d]
          members[n + 1], members[n + 2] = expires, id
          n = n + 2
        end
        if n >= 400 then flush() end  -- chunks: unpack() has a stack limit
      else
        local worst = 0
        for o = 1, no do
          local i = order[o]
          local b, nr, nt = buckets[i], need_r[i], need_t[i]
          if short(i, nr, nt) then
            local waits = {wait_for(nr - b.r, b.rate_r), wait_for(nt - b.t, b.rate_t), b.blocked - now}
            local kind = 1
            for w = 2, 3 do
              if waits[w] > waits[kind] then kind = w end
            end
            refusals[2 * i - 1], refusals[2 * i] = kind, waits[kind]
            if stop == 0 or waits[kind] > worst then worst, stop = waits[kind], i end
          end
        end
      end
    end
    for o = 1, no do need_r[order[o]] = -1 end
    stops[k] = stop
    k, nd, no, stop = k + 1, 0, 0, 0
  end
end
flush()
for i = 1, nscopes do
  if changed[i] then store(KEYS[1 + 2 * i], buckets[i]) end
end
return {now, stops, refusals}
