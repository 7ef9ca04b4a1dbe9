"""Prometheus metrics. Work counts are read from the database at scrape time, so they are right
however many workers run and wherever they run; latencies are measured in this process."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.engine import Engine

from service.app import operations

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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


class Metrics:
    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
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
        self.registry.register(_WorkCollector(engine))
