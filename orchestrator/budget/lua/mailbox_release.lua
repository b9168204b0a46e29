-- KEYS: the day counts a mailbox grant took (the mailbox's, the recipient domain's), any of them.
-- Gives one message back to each (never below 0): the email never left. The mailbox's spacing
-- stays taken: the safe side, its next send only waits a little longer.
for _, key in ipairs(KEYS) do
  if (tonumber(redis.call('GET', key)) or 0) > 0 then redis.call('DECR', key) end
end
return 1
