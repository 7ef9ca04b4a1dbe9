"""One settings object, read from `ASSAYGATE_*` environment variables by `get_settings()`.

With no configuration at all the service runs embedded: a SQLite file and a filesystem broker
under `./var`, so a laptop needs no servers. Point `ASSAYGATE_DATABASE_URL` at PostgreSQL and
`ASSAYGATE_BROKER_URL` at Redis for production.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.core.system.artifact import IMAGE_PATTERN
from service.core.system.egress import parse_port_ranges, parse_tenant_ports
from service.keys import KeyRing
from service.logs import JsonLineFormatter as JsonLineFormatter
from service.logs import TextFormatter as TextFormatter
from service.logs import configure_logging as configure_logging
from service.logs import log_format as log_format
from service.quotas import QuotaSettings
from service.sandbox.layers import LAYERS

MIB = 1024 * 1024
# Where versions before 0.1 kept the dashboard's session secret: in the signing-keys folder.
LEGACY_SESSION_SECRET = "web-session.secret"


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


class Settings(BaseSettings, QuotaSettings):
    model_config = SettingsConfigDict(env_prefix="ASSAYGATE_", extra="ignore")

    data_dir: Path = Path("var")
    database_url: str = ""
    broker_url: str = ""
    # Empty: a Redis broker doubles as the result backend; other brokers keep no task results.
    # Either way a shard's outcome lives in the database, which is what the API reads.
    result_backend: str = ""
    queue: str = "assaygate"
    # Isolates several deployments (or test sessions) sharing one Redis database.
    redis_key_prefix: str = ""
    # A shard whose worker vanished (SIGKILL, lost node) is handed to another worker after this
    # long. It must exceed the longest shard, or a slow shard runs twice (harmless, but wasted).
    broker_visibility_timeout: float = Field(default=60.0, gt=0)
    broker_restore_interval: float = Field(default=5.0, gt=0)
    # Durable shard execution. A shard not done holds a lease: from its dispatch while it is
    # queued, then renewed (every third of it) by the worker running it. A lapsed lease means the
    # message or the worker was lost; a reconciler in every worker, every `reconcile_interval_s`,
    # sends such a shard again, or fails its assay once the shard has been started or sent
    # `shard_max_attempts` times. See docs/operations.md, "Outages".
    shard_lease_s: float = Field(default=60.0, gt=0)
    reconcile_interval_s: float = Field(default=15.0, gt=0)
    shard_max_attempts: int = Field(default=5, ge=1)
    # How long a shard task retries a database that does not answer (with back-off) before it
    # hands its message back to the broker instead; it never acknowledges the shard as done.
    store_retry_s: float = Field(default=300.0, gt=0)
    trials_per_shard: int = Field(default=500, ge=1)
    # Huge plans get larger shards rather than millions of rows and messages.
    max_shards_per_assay: int = Field(default=2000, ge=1)
    max_body_bytes: int = Field(default=MIB, ge=1024)
    # A request head (line and headers) must arrive within this long of its first byte, or of
    # the connection: a client that trickles headers gets 408 and is closed.
    head_timeout_s: float = Field(default=5.0, gt=0, le=300)
    # Plan limits, checked before anything is written: trials of one fault (in paper mode, the
    # whole plan) and trials of the whole assay (every fault, before baseline/counterfactual arms).
    max_trials_per_fault: int = Field(default=100_000, ge=1)
    max_trials_per_assay: int = Field(default=2_000_000, ge=1)
    # Submissions (and re-runs) per API key per minute; 0 turns the limit off.
    submissions_per_minute: int = Field(default=60, ge=0)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    worker_concurrency: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1)
    # Trials a worker process runs at once in copies of an mcp target's world (docs/mcp.md,
    # "Slots"): agents mostly wait on models, so it may exceed the cores; counts are the same.
    worker_slots: int = Field(default=1, ge=1, le=64)
    # API server processes of `serve`, each on its own SO_REUSEPORT socket (service/serving.py).
    api_processes: int = Field(default=1, ge=1)
    readiness_timeout: float = Field(default=2.0, gt=0)
    db_pool_size: int = Field(default=10, ge=1)
    # Beyond db_pool_size under load, closed when returned; None: as many as db_pool_size.
    db_pool_overflow: int | None = Field(default=None, ge=0)
    log_level: str = "INFO"
    # auto: human-readable lines when stderr is a terminal, one JSON object per line otherwise.
    log_format: Literal["auto", "json", "text"] = "auto"
    migrations_dir: Path | None = None
    # Where the service's Ed25519 dossier-signing keys live; created on first start.
    keys_dir: Path | None = None
    # The secret that signs dashboard session cookies: the API's alone (workers never mount it),
    # so never inside `keys_dir`. Created 0600 on first start.
    session_secret_file: Path | None = None
    # The operator's key that encrypts tenants' secrets (model keys for their agents): mounted by
    # the API and by tenant workers only, never inside `keys_dir`. Created 0600 on first start.
    secrets_key_file: Path | None = None
    # The injector-credential keys: a separate ring whose private half only the API holds, so a
    # worker (which signs dossiers) can verify credentials but never mint one.
    injector_keys_dir: Path | None = None
    # The injector ring's public index, the only part of it a worker reads.
    injector_public_dir: Path | None = None
    # Injector credentials: the synthetic subject namespace an assay may touch, the cap on its
    # sandbox effects, and how long past the expected duration the credential stays valid.
    injector_namespace: str = "synthetic/"
    injector_max_effects: int = Field(default=10_000_000, ge=1)
    injector_margin_s: float = Field(default=600.0, gt=0)
    stop_max_unsafe: int | None = Field(default=None, ge=0)
    stop_deadline_s: float | None = Field(default=None, gt=0)
    # A hung or broken target stops the assay (and blocks it) instead of costing every trial.
    stop_max_target_errors: int | None = Field(default=20, ge=0)
    # Set by `serve` for its embedded worker child, which touches it once it consumes tasks.
    worker_ready_file: Path | None = None
    # Where a worker writes its state for an orchestrator's probes (`python -m worker.health`),
    # beaten from its consumer's event loop every `worker_health_interval_s`; none: not written.
    worker_health_file: Path | None = None
    worker_health_interval_s: float = Field(default=5.0, gt=0)
    # Egress policy for the URLs a manifest names (docs/operations.md, "Egress policy"). None:
    # by mode — an embedded deployment (SQLite, no servers) allows loopback and private
    # addresses, one with PostgreSQL or Redis refuses both. Metadata addresses and the gate's
    # own API, database and broker are never targets, whatever these say.
    # Loopback: `0`/off, or the ports the agents' local services use (`9000-9100,9443`). `1`
    # (deprecated) is every loopback port; never the control plane nor the gate's own relays.
    egress_allow_loopback: str | None = None
    # Loopback ports per tenant, `acme=9000-9100,9443;globex=9200`: where tenants' workers (or a
    # shared worker sending their webhooks) share a host, each reaches only its own local
    # services. Set, it replaces `egress_allow_loopback` (which must then be unset or `0`): a
    # tenant it does not name reaches no loopback port, and no two tenants share one.
    egress_loopback_tenants: str = ""
    egress_allow_private: bool | None = None
    # Comma-separated CIDRs and host names allowed even when loopback or private are refused.
    egress_allowlist: str = ""
    # The gate's other addresses, never a target (comma-separated URLs or host:port): the API's
    # advertised URL(s) and anything else of the deployment's (a metrics scraper, a proxy in
    # front of the API). The listen address, database, broker and result backend are added
    # from their own settings.
    control_plane: str = ""
    # Tenant code (docs/operations.md, "Running tenant code"). A worker started with a tenant
    # consumes only that tenant's code queue (`tenant_queue`) and runs its code, from
    # `tenant_code_dir`, inside the OS sandbox; a worker without one consumes only `queue`,
    # which never carries code.
    worker_tenant: str | None = None
    tenant_code_dir: Path | None = None
    # The sandbox's limits per process tree of tenant code (service.sandbox.ProcessLimits).
    code_cpu_s: int = Field(default=300, ge=1)
    code_memory_mb: int = Field(default=2048, ge=16)
    code_processes: int = Field(default=256, ge=1)
    code_open_files: int = Field(default=512, ge=16)
    code_file_mb: int = Field(default=64, ge=1)
    # The sandbox's layers (docs/operations.md, "The sandbox"): the uids sandboxes run
    # as as root, one leased per sandbox ("FIRST-LAST"; empty: every sandbox runs as 65534), and
    # the layers a tenant worker must have to run code at all (comma-separated names of
    # service.sandbox.layers.LAYERS; empty: whatever the host gives, recorded in the dossier).
    sandbox_uid_range: str = Field(default="200000-265535", pattern=r"^(\d+-\d+)?$")
    sandbox_min_posture: str = ""
    # Code artifacts (docs/operations.md, "How code reaches the workers"): the largest upload
    # (`POST /v1/artifacts`, streamed and refused past it), and what a tenant worker unpacks at
    # most (bytes and entries) into its cache of unpacked artifacts, one folder per digest.
    artifact_max_bytes: int = Field(default=64 * MIB, ge=1024)
    artifact_unpacked_max_bytes: int = Field(default=512 * MIB, ge=1024)
    artifact_max_entries: int = Field(default=20_000, ge=1)
    # Default: <data_dir>/code-cache. Only a tenant worker writes it.
    artifact_cache_dir: Path | None = None
    # The operator-built image a tenant worker runs in (`name@sha256:…`, pinned by digest): it
    # holds what the team's artifact cannot vendor. The worker records it with each shard whose
    # code it ran, and the dossier names it, `declared` (the worker's word; nothing checks it).
    tenant_image: str | None = Field(default=None, pattern=IMAGE_PATTERN)
    # Webhooks (docs/operations.md, "Webhooks"): the address people reach the dashboard at, for
    # the links a webhook carries (empty: http://<host>:<port>); each attempt's timeout; attempts
    # before a delivery is failed; the back-off after the first failure, doubling to the cap.
    public_url: str = ""
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    webhook_max_attempts: int = Field(default=8, ge=1)
    webhook_backoff_s: float = Field(default=30.0, gt=0)
    webhook_backoff_max_s: float = Field(default=3600.0, gt=0)
    # The bearer token Prometheus scrapes `/metrics` with (docs/operations.md, "Metrics"). Empty:
    # a tenant admin's key still reads it, deprecated (its answer says so in a header).
    metrics_token: str = Field(default="", repr=False)

    @field_validator("sandbox_uid_range")
    @classmethod
    def _uid_range(cls, value: str) -> str:
        if value:
            first, last = (int(n) for n in value.split("-"))
            if not 1000 <= first <= last < 2**32 - 1:
                raise ValueError("must be FIRST-LAST with 1000 <= FIRST <= LAST < 4294967295")
        return value

    @field_validator("sandbox_min_posture")
    @classmethod
    def _min_posture(cls, value: str) -> str:
        unknown = [n for n in _names(value) if n not in LAYERS]
        if unknown:
            raise ValueError(f"unknown layer(s) {unknown}: each must be one of {list(LAYERS)}")
        return value

    @property
    def sandbox_uids(self) -> tuple[int, int] | None:
        if not self.sandbox_uid_range:
            return None
        first, last = (int(n) for n in self.sandbox_uid_range.split("-"))
        return first, last

    @property
    def sandbox_required(self) -> frozenset[str]:
        return frozenset(_names(self.sandbox_min_posture))

    @field_validator("egress_allow_loopback", mode="before")
    @classmethod
    def _loopback_words(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, str):
            value = value.strip().lower()
            if value in _ON | _OFF:
                return "1" if value in _ON else "0"
            parse_port_ranges(value)
        return value

    @field_validator("control_plane")
    @classmethod
    def _control_plane_addresses(cls, value: str) -> str:
        for item in (i.strip() for i in value.split(",")):
            if not item:
                continue
            url = item if "://" in item else f"tcp://{item}"
            try:
                parts = urlsplit(url)
                host = parts.hostname
                port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
            except ValueError:
                host, port = None, None
            if not host or port is None:
                raise ValueError(f"{item!r} is not host:port or a URL with a host")
            if _placeholder(host):
                raise ValueError(f"{item!r} is a placeholder ({_INVALID}): name the API's address")
        return value

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, value: str) -> str:
        if not value:
            return value
        try:
            parts = urlsplit(value)
            scheme, host = parts.scheme, parts.hostname
        except ValueError:
            scheme, host = "", None
        if scheme not in ("http", "https") or not host:
            raise ValueError(f"{value!r} is not an http(s) URL with a host")
        if _placeholder(host):
            raise ValueError(
                f"{value!r} is a placeholder ({_INVALID}): set the address people reach the "
                "dashboard at"
            )
        return value

    @model_validator(mode="after")
    def _embedded_defaults(self) -> Settings:
        self.data_dir = self.data_dir.expanduser().absolute()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'assaygate.sqlite3'}"
        if not self.broker_url:
            # The host part means nothing to this transport; naming one keeps kombu from warning.
            self.broker_url = "filesystem://localhost/"
        if self.keys_dir is None:
            self.keys_dir = self.data_dir / "keys"
        if self.injector_keys_dir is None:
            self.injector_keys_dir = self.data_dir / "injector-keys"
        if self.injector_public_dir is None:
            self.injector_public_dir = self.data_dir / "injector-public"
        if self.session_secret_file is None:
            self.session_secret_file = self.data_dir / "api" / "session.secret"
        if self.secrets_key_file is None:
            self.secrets_key_file = self.data_dir / "secrets.key"
        if self.artifact_cache_dir is None:
            self.artifact_cache_dir = self.data_dir / "code-cache"
        keys = self.keys_dir.expanduser().absolute()
        secret = self.session_secret_file.expanduser().absolute()
        if secret.is_relative_to(keys):
            raise ValueError(
                "ASSAYGATE_SESSION_SECRET_FILE must not be inside ASSAYGATE_KEYS_DIR, which "
                "workers mount: a worker could sign dashboard sessions"
            )
        tenants = self.secrets_key_file.expanduser().absolute()
        public = self.injector_public_dir.expanduser().absolute()
        if tenants.is_relative_to(keys) or tenants.is_relative_to(public) or tenants == secret:
            raise ValueError(
                "ASSAYGATE_SECRETS_KEY_FILE must be a file of its own, outside ASSAYGATE_KEYS_DIR "
                "and ASSAYGATE_INJECTOR_PUBLIC_DIR, which every worker mounts"
            )
        if parse_tenant_ports(self.egress_loopback_tenants) and self._loopback_value() not in (
            None,
            "0",
        ):
            raise ValueError(
                "ASSAYGATE_EGRESS_LOOPBACK_TENANTS and ASSAYGATE_EGRESS_ALLOW_LOOPBACK are both "
                "set: name loopback ports per tenant only (the deployment-wide allowance lets "
                "every tenant reach every allowed port)"
            )
        if not self.result_backend and self.broker_is_redis:
            self.result_backend = self.broker_url
        return self

    def injector_ring(self) -> KeyRing:
        """The API's view of the injector ring: private keys here, public index mirrored."""
        assert self.injector_keys_dir is not None
        return KeyRing(self.injector_keys_dir, self.injector_public_dir)

    @property
    def link_base(self) -> str:
        """Where the links a webhook carries point: `public_url`, else this API's address."""
        return self.public_url.rstrip("/") or f"http://{self.host}:{self.port}"

    @property
    def broker_is_redis(self) -> bool:
        return self.broker_url.startswith(("redis://", "rediss://", "redis+socket://"))

    @property
    def database_is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def embedded(self) -> bool:
        """No server to reach: the API may start its own worker and migrate on start."""
        return self.database_is_sqlite and not self.broker_is_redis

    @property
    def egress_loopback(self) -> bool:
        """Whether manifests may name loopback addresses (the gate's own ports never)."""
        value = self._loopback_value()
        return self.embedded if value is None else value != "0"

    @property
    def egress_loopback_ports(self) -> tuple[tuple[int, int], ...]:
        """The loopback ports allowed (empty with `egress_loopback`: every port)."""
        value = self._loopback_value()
        return () if value in (None, "0", "1") else parse_port_ranges(value or "")

    def egress_loopback_of(self, tenant: str | None) -> tuple[bool, tuple[tuple[int, int], ...]]:
        """Whether `tenant`'s URLs may name loopback, and on which ports (empty: every port).
        With `egress_loopback_tenants` set, a tenant's own ports only, and none for a tenant it
        does not name (or for no tenant); otherwise the deployment-wide allowance."""
        by_tenant = parse_tenant_ports(self.egress_loopback_tenants)
        if not by_tenant:
            return self.egress_loopback, self.egress_loopback_ports
        ports = by_tenant.get(tenant) if tenant is not None else None
        return (True, ports) if ports else (False, ())

    @property
    def egress_loopback_deprecated(self) -> bool:
        """`ASSAYGATE_EGRESS_ALLOW_LOOPBACK=1`: every port, which an operator should narrow."""
        return self._loopback_value() == "1"

    def _loopback_value(self) -> str | None:
        # `model_copy(update=...)` skips the validator: a bool may still arrive here.
        value: Any = self.egress_allow_loopback
        return None if value is None else str(self._loopback_words(value))

    @property
    def egress_private(self) -> bool:
        return self.embedded if self.egress_allow_private is None else self.egress_allow_private

    @property
    def broker_dir(self) -> Path:
        return self.data_dir / "broker"

    def tenant_queue(self, tenant: str) -> str:
        """The Celery queue of a tenant's code shards: `<queue>.tenant.<name>`, the name kept
        as it is when it is a plain word (letters, digits, `-`, `_`, at most 64), otherwise
        reduced to one plus a digest of the whole name, so two tenants never share a queue."""
        if _PLAIN_NAME.fullmatch(tenant):
            return f"{self.queue}.tenant.{tenant}"
        word = re.sub(r"[^A-Za-z0-9_-]+", "-", tenant).strip("-")[:40] or "tenant"
        digest = hashlib.sha256(tenant.encode()).hexdigest()[:12]
        return f"{self.queue}.tenant.{word}-{digest}"

    @property
    def webhook_queue(self) -> str:
        """The webhook deliveries' own queue, `<queue>.webhooks`, which the shared workers
        consume beside the shared queue (`worker.webhooks`)."""
        return f"{self.queue}.webhooks"

    @property
    def worker_queue(self) -> str:
        """The one queue this worker consumes: its tenant's code queue, or the shared one."""
        return self.tenant_queue(self.worker_tenant) if self.worker_tenant else self.queue

    def resolved_migrations_dir(self) -> Path:
        """ASSAYGATE_MIGRATIONS_DIR; else the migrations a wheel ships inside the package
        (`service/migrations`, copied there by setup.py); else the checkout's `migrations/`."""
        if self.migrations_dir is not None:
            return self.migrations_dir
        here = Path(__file__).resolve().parent
        shipped = here / "migrations"
        if (shipped / "env.py").is_file():
            return shipped
        return here.parent / "migrations"

    def celery_config(self) -> dict[str, Any]:
        """Broker and routing configuration shared by the API (which only sends) and workers."""
        transport: dict[str, Any] = {}
        if self.broker_is_redis:
            transport = {
                "visibility_timeout": self.broker_visibility_timeout,
                "unacked_restore_interval": self.broker_restore_interval,
                "unacked_restore_throttle": 1,
                "socket_connect_timeout": self.readiness_timeout,
                "socket_timeout": 10.0,
            }
            if self.redis_key_prefix:
                transport["global_keyprefix"] = self.redis_key_prefix
        elif self.broker_url.startswith("filesystem"):
            folder = str(self.broker_dir / "queue")
            transport = {
                "data_folder_in": folder,
                "data_folder_out": folder,
                "processed_folder": str(self.broker_dir / "processed"),
                "store_processed": False,
                "polling_interval": 0.05,
            }
        config: dict[str, Any] = {
            "broker_url": self.broker_url,
            "broker_transport_options": transport,
            "broker_connection_retry_on_startup": True,
            "task_default_queue": self.queue,
            "task_serializer": "json",
            "result_serializer": "json",
            "accept_content": ["json"],
            # A dead broker must fail a submission quickly (503), not hang the request.
            "task_publish_retry_policy": {
                "max_retries": 1,
                "interval_start": 0,
                "interval_step": 0.2,
                "interval_max": 0.2,
            },
        }
        if self.broker_url.startswith("filesystem"):
            # kombu's own filesystem put can be read half-written: service.spool says how.
            config["broker_transport"] = "service.spool:Transport"
        if self.result_backend:
            config["result_backend"] = self.result_backend
            config["result_expires"] = 3600
            if self.result_backend.startswith("redis") and self.redis_key_prefix:
                config["result_backend_transport_options"] = {
                    "global_keyprefix": self.redis_key_prefix
                }
        else:
            config["task_ignore_result"] = True
        return config

    def child_environment(self) -> dict[str, str]:
        """The environment that makes a child process (a worker, an API process) see exactly
        these settings, command-line overrides included."""
        env = dict(os.environ)
        for name, value in self.model_dump().items():
            if value is not None:
                env[f"ASSAYGATE_{name.upper()}"] = str(value)
        return env


# RFC 6761 reserves `.invalid`: no such name ever resolves, so a setting naming one is a
# placeholder nobody filled in (deploy/k8s ships them), refused at start rather than run on.
_INVALID = "a .invalid host never resolves"


def _placeholder(host: str) -> bool:
    return host.rstrip(".").lower().rpartition(".")[2] == "invalid"


class SettingsInvalid(ValueError):
    """Settings a process refuses at start: one line naming each variable and its rule."""


def settings_problems(error: ValidationError) -> str:
    said = []
    for problem in error.errors():
        message = str(problem["msg"]).removeprefix("Value error, ")
        field = problem["loc"][0] if problem["loc"] else None
        said.append(f"ASSAYGATE_{str(field).upper()}: {message}" if field else message)
    return "; ".join(said)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    try:
        return Settings()
    except ValidationError as error:
        raise SettingsInvalid(settings_problems(error)) from None
