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


class OwnerCounter(models.Model):
    """One shard of one owner's two counters, `outreach_owner_dispatched` and
    `outreach_owner_sent` (label owner_id): outreach.counters adds to them and reads them back
    as those series, as it does MetricCounter's.

    Their own table, keyed by integers: a claim adds to one owner's series per owner claimed
    (500 at 10,000 owners), and as MetricCounter rows each was a name and a label's text to
    build, bind and compare in a wide unique index (until 2026-12-07; migration 0033 moved
    them here). The owner is a plain number, not a foreign key: like every labelled series,
    an owner's totals outlive it (never pruned), and an insert checks no key. Pages half
    empty, as MetricCounter's, so the updates stay in place (HOT).
    """

    owner_id = models.BigIntegerField()
    shard = models.PositiveSmallIntegerField(default=0)  # as MetricCounter.shard
    dispatched = models.BigIntegerField(default=0)
    sent = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner_id", "shard"], name="owner_counter_unique")]

    def __str__(self) -> str:
        return f"owner {self.owner_id}[{self.shard}]: dispatched {self.dispatched}, sent {self.sent}"
