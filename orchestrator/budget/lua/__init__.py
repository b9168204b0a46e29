"""The budget's Lua scripts, assembled from the .lua files beside this one.

Each script runs atomically in Redis: it checks every bucket involved, then changes all of them
or none. Only orchestrator.budget calls them (core.py registers them: EVALSHA).

Conventions shared by every script:
- ARGV[1] is a clock override in ms, '' in production: time then comes from Redis `TIME`, one
  clock for every worker. Tests pass a fake clock to compare the Lua with the pure model.
- Bucket levels are integers in units of 1/60000 (maths.py): a limit of L per minute refills
  L units per ms. Lua numbers are doubles (exact to 2**53) and replies truncate to integers,
  so everything returned is whole ms or whole units; `int()` writes numbers back exactly
  (tostring keeps only 14 significant digits).
- Reservations: hash `res` (id -> "<requests>:<tokens>") and zset `exp` (id -> expiry ms).
- Per-scope bucket parameters are 8 ARGV: capacity r/t (units), configured window limits r/t,
  refill numerator/denominator (maths.bucket_rate) and the AIMD step r/t.
- Helpers come in snippets (clock, limits, bucket, records, call_log) and a script includes
  only those it uses: Redis re-creates every local function on each call, on its one thread.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent


def _script(body: str, *helpers: str) -> str:
    return "".join((_HERE / f"{name}.lua").read_text() for name in (*helpers, body))


def _function(name: str, body: str) -> str:
    """A script's body as a local function of its own KEYS and ARGV (its top-level `return`
    returns from the function)."""
    return f"local function {name}(KEYS, ARGV)\n{(_HERE / f'{body}.lua').read_text()}\nend\n"


# What a script after reports is made of (`after_reports`): its body and helpers.
PARTS = {
    "ACQUIRE_CALL": ("acquire_call", ("clock", "limits", "call_log")),
    "SETTLE": ("settle", ("clock", "limits", "bucket")),
    "REPORT": ("report", ("clock", "limits", "call_log")),
}


def after_reports(name: str) -> str:
    """`name`'s script run after any number of REPORT calls, in one round trip: a worker's
    answer reported with its job's next budget call (docs/scaling.md). ARGV: the count of
    reports n, then each report's KEYS and ARGV counts, then their ARGV and the script's; KEYS:
    the reports', then the script's. A report that fails (pcall) never stops the script."""
    body, helpers = PARTS[name]
    needed = dict.fromkeys((*PARTS["REPORT"][1], *helpers))  # once each, in order
    prelude = "".join((_HERE / f"{helper}.lua").read_text() for helper in needed)
    return (
        prelude
        + _function("report", "report")
        + _function("main", body)
        + """
local n = tonumber(ARGV[1])
local ki, ai = 0, 1 + 2 * n
for i = 1, n do
  local nk, na = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local k, a = {}, {}
  for j = 1, nk do k[j] = KEYS[ki + j] end
  for j = 1, na do a[j] = ARGV[ai + j] end
  ki, ai = ki + nk, ai + na
  pcall(report, k, a)
end
local k, a = {}, {}
for j = ki + 1, #KEYS do k[#k + 1] = KEYS[j] end
for j = ai + 1, #ARGV do a[#a + 1] = ARGV[j] end
return main(k, a)
"""
    )


RESERVE = _script("reserve", "clock", "limits", "bucket", "records")
SETTLE = _script("settle", "clock", "limits", "bucket")
HEADROOM = _script("headroom", "clock", "limits", "bucket")
ACQUIRE_CALL = _script("acquire_call", "clock", "limits", "call_log")
REPORT = _script("report", "clock", "limits", "call_log")
REPORT_429 = _script("report_429", "clock", "limits", "call_log")
SNAPSHOT = _script("snapshot", "clock", "limits", "bucket", "records", "call_log")
# The email send budget (sends.py): account buckets and each sender domain's day.
SEND_RESERVE = _script("send_reserve", "clock", "limits", "bucket", "records")
SEND_RELEASE = _script("send_release", "clock", "limits", "bucket")
# Mailboxes (mailboxes.py): a mailbox's day, warm-up and spacing, a recipient domain's day.
MAILBOX_RESERVE = _script("mailbox_reserve", "clock")
MAILBOX_RELEASE = _script("mailbox_release")
