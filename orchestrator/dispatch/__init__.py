"""The dispatcher: which queued work may run now, and the cycle that runs it.

- `cycle`: the I/O shell, one cycle under the cluster-wide lease (`singleton`): approved drafts
  to `send`, LLM jobs reserved and claimed;
- `selection`: the pure policy (fair share across owners, tiers, backfill, organization caps),
  for the LLM slots and the send rate's slots alike;
- `send_flow`: how many approved drafts a cycle may hand to `send` under the send rate;
- `reads`: the cycle's queries, each bounded by slots and active owners;
- `owner_limits`: an owner's daily limit and operating hours (pure);
- `owner_tokens`, `inflight`, `deployment_plan`: what a job costs, how much work may be in
  flight, which deployments take it;
- `singleton`: the lease that keeps one cycle at a time.
"""
