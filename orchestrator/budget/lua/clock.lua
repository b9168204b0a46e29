-- Shared by every script: units, the clock (Redis TIME unless the caller overrides it), exact
-- integer formatting.
local UNITS = 60000
local WINDOW = 60000

local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function int(x)
  if x == 0 then return '0' end  -- '%.0f' writes -0 as '-0', which Redis refuses as an integer
  return string.format('%.0f', x)
end
