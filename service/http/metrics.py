"""Prometheus metrics. Work counts are read from the database at scrape time, so they are right
however many workers run and wherever they run; latencies are measured in this process; queue
depths are the lengths of the Celery queues' Redis lists. docs/operations.md, "Metrics", lists
every series.

Two registries: `registry` (everything: what the scrape token reads) and `legacy`, what a tenant
admin's key still reads while no scrape token is configured (deprecated): without the series
that name tenants (their code queues).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from service.app import operations
from service.app.records import utcnow
from service.settings import Settings

log = logging.getLogger("assaygate.metrics")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Assays take seconds to hours: submission to decision.
ASSAY_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0)
#: How long holds have waited for a reviewer: an hour, four, a day, three, a week.
HOLD_AGE_BUCKETS = (3600.0, 4 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0)
#: kombu's Redis transport keeps a queue's priorities in lists `<queue>`, `<queue>\x06\x16<n>`.
_PRIORITY_SEP = "\x06\x16"
_PRIORITIES = ("", "3", "6", "9")


class _WorkCollector(Collector):
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("assaygate_database_up", "1 when the last scrape read the database")
        totals = operations.work(self._engine)
        if totals is None:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily(
            "assaygate_assays_running",
            "Assays with at least one shard started and no decision yet",
            value=totals.assays_by_status.get("running", 0),
        )
        yield GaugeMetricFamily(
            "assaygate_assays_queued",
            "Assays waiting for their first shard to start",
            value=totals.assays_by_status.get("queued", 0),
        )
        yield CounterMetricFamily(
            "assaygate_shards_done", "Shards whose result is stored", value=totals.shards_done
        )
        yield CounterMetricFamily(
            "assaygate_trials_executed", "Trials run in stored shards", value=totals.trials_executed
        )


class _OperatorCollector(Collector):
    """Decisions, open holds by age, assay durations, refusals and webhook attempts."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        found = operations.operator(self._engine, ASSAY_BUCKETS)
        if found is None:
            return
        decisions = CounterMetricFamily(
            "assaygate_decisions", "Assays decided, by decision", labels=["decision"]
        )
        for decision, n in sorted(found.decisions.items()):
            decisions.add_metric([decision], n)
        yield decisions
        now = utcnow()
        ages = sorted((now - t).total_seconds() for t in found.hold_opened)
        yield GaugeMetricFamily("assaygate_holds_open", "Holds awaiting review", value=len(ages))
        yield GaugeMetricFamily(
            "assaygate_hold_oldest_open_age_seconds",
            "Age of the oldest hold awaiting review (0: none)",
            value=ages[-1] if ages else 0.0,
        )
        # A histogram of the holds waiting now (a snapshot: it falls as holds are reviewed), so
        # that the text format has its `_count` and `_sum`; it has no gauge histogram.
        yield HistogramMetricFamily(
            "assaygate_holds_open_age_seconds",
            "Holds awaiting review, by how long they have waited",
            buckets=[
                *((str(b), float(sum(1 for a in ages if a <= b))) for b in HOLD_AGE_BUCKETS),
                ("+Inf", float(len(ages))),
            ],
            sum_value=float(sum(ages)),
        )
        d = found.durations
        yield HistogramMetricFamily(
            "assaygate_assay_duration_seconds",
            "Finished assays, by the time from submission to decision",
            buckets=[*((str(b), float(n)) for b, n in d.buckets), ("+Inf", float(d.count))],
            sum_value=d.total,
        )
        refusals = CounterMetricFamily(
            "assaygate_sandbox_refusals",
            "Refusals inside assays: effects the sandbox refused (sandbox), disturbances the "
            "injector refused (injector), tenant code a worker refused to run (code)",
            labels=["kind"],
        )
        for kind, n in sorted(found.refusals.items()):
            refusals.add_metric([kind], n)
        yield refusals
        attempts = CounterMetricFamily(
            "assaygate_webhook_attempts",
            "Webhook delivery attempts, by outcome (delivered, failed, refused)",
            labels=["outcome"],
        )
        for outcome, n in sorted(found.webhook_attempts.items()):
            attempts.add_metric([outcome], n)
        yield attempts
        deliveries = GaugeMetricFamily(
            "assaygate_webhook_deliveries",
            "Webhook deliveries, by status (pending, delivered, failed, dropped)",
            labels=["status"],
        )
        for status, n in sorted(found.webhook_deliveries.items()):
            deliveries.add_metric([status], n)
        yield deliveries


class _QueueCollector(Collector):
    """Messages waiting in the shared queue, the webhook deliveries' queue and each tenant's
    code queue (Redis only)."""

    def __init__(self, engine: Engine, settings: Settings) -> None:
        self._engine = engine
        self._settings = settings
        self._client: redis.Redis | None = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            timeout = self._settings.readiness_timeout
            self._client = redis.Redis.from_url(
                self._settings.broker_url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        return self._client

    def collect(self) -> Iterator[Metric]:
        settings = self._settings
        if not settings.broker_is_redis:
            return
        # The webhook deliveries' queue too: a slow receiver's backlog shows there, not in the
        # shards' queue.
        queues = [("", settings.queue), ("", settings.webhook_queue)]
        for tenant in operations.code_tenants(self._engine) or []:
            queues.append((tenant, settings.tenant_queue(tenant)))
        depth = GaugeMetricFamily(
            "assaygate_queue_depth",
            "Messages waiting in a Celery queue (tenant empty: a queue of the shared workers)",
            labels=["queue", "tenant"],
        )
        up = GaugeMetricFamily("assaygate_broker_up", "1 when the last scrape read the broker")
        try:
            pipe = self._redis().pipeline(transaction=False)
            for _tenant, queue in queues:
                for p in _PRIORITIES:
                    name = f"{settings.redis_key_prefix}{queue}{_PRIORITY_SEP + p if p else ''}"
                    pipe.llen(name)
            lengths = pipe.execute()
        except redis.RedisError as exc:
            log.warning("metrics: the broker did not answer (%s)", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        per = len(_PRIORITIES)
        for i, (tenant, queue) in enumerate(queues):
            depth.add_metric([queue, tenant], sum(int(n) for n in lengths[i * per : (i + 1) * per]))
        yield depth


class Metrics:
    def __init__(self, engine: Engine, settings: Settings | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.legacy = CollectorRegistry(auto_describe=True)
        self.submission_seconds = Histogram(
            "assaygate_submission_seconds",
            "Time to validate, record and enqueue a candidate",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.gate_check_seconds = Histogram(
            "assaygate_gate_check_seconds",
            "Time to answer a candidate's status and decision",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.gate_reads_before_routing = Counter(
            "assaygate_gate_reads_before_routing",
            "Gate reads answered from the cache before routing (service/api/cached_gate.py)",
            registry=self.registry,
        )
        work, operator = _WorkCollector(engine), _OperatorCollector(engine)
        for collector in (
            self.submission_seconds,
            self.gate_check_seconds,
            self.gate_reads_before_routing,
            work,
            operator,
        ):
            self.legacy.register(collector)
        self.registry.register(work)
        self.registry.register(operator)
        if settings is not None:
            self.registry.register(_QueueCollector(engine, settings))
