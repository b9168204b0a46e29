"""The dispatcher: which queued work may run now, and the cycle that runs it.

- `cycle`: the I/O shell, one cycle under the cluster-wide lease (`lease`);
- `selection`: the pure policy (fair share across owners, tiers, backfill, organization caps);
- `reads`: the cycle's queries, each bounded by slots and active owners;
- `owner_limits`: an owner's daily limit and operating hours (pure);
- `recovery`: in-flight work whose worker vanished goes back to the queue.
"""
