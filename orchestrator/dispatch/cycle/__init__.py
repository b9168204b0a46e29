"""The dispatch cycle: the I/O shell around the pure selection policy (orchestrator.dispatch.selection).

One cycle, holding the cluster-wide lease:
  recover stuck work -> owner capacity (limits, hours, pauses) -> approved drafts to `send`
  (no LLM: owners over their organization's daily spend cap still send, and stop there)
  -> LLM slots = min(in-flight headroom, what the deployments can place now)
  -> per-tier candidates (per-owner top-k) -> select_batch (in tokens or in count)
  -> place on deployments -> reserve each owner's learned tokens -> claim -> enqueue
Every query is bounded by slots and active owners (see orchestrator.dispatch.reads), so a cycle
costs the same at a thousand queued rows as at a million.

Modules, one role each: `shell` (the lease, the owners' room, the report), `sends` (approved
drafts to `send`), `generation` (the LLM slots and the selection), `cursor_state` (the
selection's cursor in Redis), `reservation` (reserve on deployments and caps, claim), `notes`
(why waiting rows wait), `enqueue` (tasks published on commit).
"""

from __future__ import annotations

from orchestrator.dispatch.cycle.cursor_state import CURSOR_KEY
from orchestrator.dispatch.cycle.sends import SEND_CURSOR_KEY
from orchestrator.dispatch.cycle.shell import CycleReport, dispatch_cycle

__all__ = ["CURSOR_KEY", "SEND_CURSOR_KEY", "CycleReport", "dispatch_cycle"]
