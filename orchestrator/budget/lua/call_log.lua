-- Call logs: a zset per scope, score = ms, member = '<seq>:<cumulative tokens>' (seq zero-padded
-- so equal scores sort in call order). Sums over any time range are then two O(log n) lookups.
local function cum_of(member) return tonumber(string.match(member, ':(%d+)$')) end

local function cum_at(log, base, t)
  local e = redis.call('ZREVRANGEBYSCORE', log, int(t), '-inf', 'LIMIT', 0, 1)
  if #e == 0 then return base end
  return cum_of(e[1])
end
