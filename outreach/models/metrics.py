"""The stored shards of the pipeline's Prometheus counters (written and read by outreach.counters)."""

from __future__ import annotations

from django.db import models


class MetricCounter(models.Model):
    """One shard of one Prometheus counter (or histogram bucket, sum or count) of the pipeline.

    Counted where the event happens: outreach.counters adds to these rows in the transaction
    that records the state change (so a rolled-back or lost move counts nothing), and reads
    them back summed over shards for /metrics. Never pruned: retention deletes history, not
    these totals, so they only ever grow (docs/architecture.md, "Metrics"). Its pages are kept
    half empty (fillfactor 50, migration 0032), so the updates stay in place (HOT).
    """

    name = models.CharField(max_length=80)
    labels = models.CharField(max_length=200, blank=True)  # "k=v,k=v", keys sorted
    # Writers spread over a few rows per series (by process id): concurrent transitions then
    # rarely wait on one hot row's lock until the other's commit.
    shard = models.PositiveSmallIntegerField(default=0)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "labels", "shard"], name="metric_counter_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.labels}}}[{self.shard}] = {self.value}"
