"""Moves the wall clock of every Python process the tests start (pytest, Celery workers, beat,
the demo's processes) by TEST_CLOCK_OFFSET_S seconds, when scripts/test.sh was given TEST_CLOCK.

On sys.path only through PYTHONPATH, which scripts/test.sh sets with TEST_CLOCK; Python imports
`sitecustomize` at start. time-machine moves time.time() and datetime.now() and lets them tick
on from there; monotonic clocks, sleeps and waits are untouched. Servers that are not Python
(PostgreSQL, Redis, the browser) keep the real time, as other hosts would.
"""

from __future__ import annotations

import os

_offset = os.environ.get("TEST_CLOCK_OFFSET_S")
if _offset:
    import time

    import time_machine
    from time_machine import escape_hatch

    _coordinates = time_machine.travel(time.time() + float(_offset), tick=True).start()
    # Starting takes a few hundred microseconds: take them back, so that every process reads
    # one clock to the microsecond (tests order spans across processes).
    _coordinates.shift(escape_hatch.time.time() + float(_offset) - time.time())
