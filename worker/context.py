"""A worker process's resources: its database engine (the one place the worker opens the
database; every unit of work goes through `service.app`), the public keys it checks credentials
against, its target adapters and the assays it has parsed.

Created on first use, so a prefork child never shares its parent's database connections.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.app import artifacts, shards
from service.app.errors import SecretMissing
from service.app.records import DATABASE_ERRORS, AssayInputs
from service.app.rights import Held, RightEnded, seals
from service.app.secrets import secrets_for
from service.core.faults.plan import AssayPlan, parse_plan
from service.core.signing.dossier import PublicKey
from service.core.system.manifest import Manifest, parse_manifest, runs_code
from service.core.system.redaction import Redactor
from service.core.system.secret import SecretsKey
from service.core.trial.engine import TrialEngine
from service.core.trial.target import Target
from service.db.session import make_engine
from service.keys import KeyRing, load_secrets_key
from service.net.egress import EgressPolicy
from service.sandbox import Tenure
from service.settings import Settings
from service.targets import close_target, load_target
from worker.code import Code, confinement_for, prepare
from worker.rights import Warden

log = logging.getLogger("assaygate.worker")

# Target adapters kept per process: a python target holds a child process, an http target a tool
# server, so the least recently used beyond this many are closed.
MAX_TARGETS = 4


@dataclass(frozen=True)
class Parsed:
    """An assay's inputs, parsed once per process and reused by each of its shards."""

    inputs: AssayInputs
    manifest: Manifest
    plan: AssayPlan


class WorkerContext:
    """Per-process resources, created on first use so a prefork child never shares its parent's
    database connections."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._engine: Engine | None = None
        self._pid = 0
        self._assays: OrderedDict[uuid.UUID, Parsed] = OrderedDict()
        self._keys: dict[str, PublicKey] = {}
        self._targets: OrderedDict[str, Target | TrialEngine | None] = OrderedDict()
        self._egress: dict[str, EgressPolicy] = {}
        self._secrets_key: SecretsKey | None = None
        self._lock = threading.Lock()  # the targets, read by the warden's thread too
        self._values: dict[uuid.UUID, set[str]] = {}
        self.warden = Warden(lambda: self.engine, self.end_assay)
        # The code each recent assay runs, fetched, checked and unpacked once per assay.
        self._code: OrderedDict[uuid.UUID, Code] = OrderedDict()

    def code(self, assay_id: uuid.UUID, inputs: AssayInputs) -> Code:
        """The tenant's code this assay runs (`worker.code.prepare`: the candidate's artifact,
        fetched by digest and hashed again, or the operator's folder); raises
        `worker.code.CodeRefused`. Once per assay per process."""
        found = self._code.get(assay_id)
        if found is not None:
            return found
        sha256 = inputs.code_sha256

        def fetch() -> bytes | None:
            assert sha256 is not None
            return artifacts.fetch(self.engine, inputs.tenant_id, sha256)

        found = self._code[assay_id] = prepare(self.settings, inputs, fetch)
        while len(self._code) > 256:
            self._code.popitem(last=False)
        return found

    def code_ran(self, assay_id: uuid.UUID) -> Code | None:
        """The code this process prepared for the assay, if it runs any."""
        return self._code.get(assay_id)

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            self.forget_engine()
            self._engine = make_engine(self.settings)
            self._pid = os.getpid()
            self._assays.clear()
        return self._engine

    def forget_engine(self) -> None:
        """In a forked child: drop the parent's pooled connections without closing them (they
        are the parent's sockets), as SQLAlchemy advises for multiprocessing."""
        if self._engine is not None:
            self._engine.dispose(close=False)
            self._engine = None

    def public_keys(self) -> dict[str, PublicKey]:
        """The service's published keys (public halves only: no private key reaches a worker)."""
        if not self._keys:
            self.refresh_keys()
        return self._keys

    def refresh_keys(self) -> None:
        # Only the public index of the injector ring: no credential-minting key reaches a worker.
        assert self.settings.injector_public_dir is not None
        self._keys = {k.keyid: k for k in KeyRing(self.settings.injector_public_dir).published()}

    def target(
        self, assay_id: uuid.UUID, manifest: Manifest, inputs: AssayInputs
    ) -> Target | TrialEngine | None:
        """The adapter for a python, http or mcp target, one per tenant and manifest per
        process. Its connections to the manifest's URLs are checked against the egress policy;
        an mcp target's world lock is the tenant's and names this assay while a trial holds it;
        a manifest naming the tenant's code gets its confinement (the OS sandbox, the tenant's
        named secrets, the egress check) and never runs without one; the same manifest with
        other code is another target."""
        tenant = inputs.tenant_id.hex
        code = self.code(assay_id, inputs) if runs_code(manifest) else None
        key = f"{tenant}:{manifest.digest()}:{code.sha256 if code is not None else ''}"
        if code is not None:
            # The tenant's code is warm for this assay's shards only, and only while it may run.
            key = f"{assay_id}:{key}"
            lapse = self.warden.check(assay_id)
            if lapse is not None:
                self.end_assay(assay_id, lapse)
        with self._lock:
            target = self._targets.get(key)
            if key in self._targets:
                self._targets.move_to_end(key)
        if key not in self._targets:
            target = self._load(assay_id, manifest, inputs, code, key)
        evicted = []
        with self._lock:
            while len(self._targets) > MAX_TARGETS:
                evicted.append(self._targets.popitem(last=False)[1])
        for old in evicted:
            close_target(old)
        if hasattr(target, "holder"):  # an mcp engine (imported lazily, with the MCP SDK)
            setattr(target, "holder", str(assay_id))  # noqa: B010
            setattr(target, "on_wait", self._waiting(assay_id, inputs))  # noqa: B010
        return target

    def _load(
        self,
        assay_id: uuid.UUID,
        manifest: Manifest,
        inputs: AssayInputs,
        code: Code | None,
        key: str,
    ) -> Target | TrialEngine | None:
        """A new adapter; for the tenant's code, confined under the assay's tenure, its secrets
        sealed (digests read before the values) and remembered for the assay's redaction."""
        # The tenant's own policy: its loopback ports, where they are set per tenant.
        egress = self._egress.get(inputs.tenant)
        if egress is None:
            egress = EgressPolicy.from_settings(self.settings, tenant=inputs.tenant)
            self._egress[inputs.tenant] = egress
        confinement = None
        if code is not None:
            names = list(manifest.target.secrets)
            held = Held(
                assay_id,
                inputs.tenant_id,
                inputs.tenant,
                seals(self.engine, inputs.tenant_id, names),
            )
            holding = self.warden.holding(assay_id)
            tenure = holding.tenure if holding is not None else Tenure(str(assay_id))
            values = self.secrets(inputs, manifest)
            self._held_values(assay_id).update(values.values())
            confined = confinement_for(self.settings, manifest, values, egress.resolve, code)
            assert confined is not None  # the manifest names code
            confinement = replace(confined, tenure=tenure)
            self.warden.hold(held, tenure, key)
        target = load_target(
            manifest,
            confinement=confinement,
            egress=egress,
            tenant=inputs.tenant_id.hex,
            slots=self.settings.worker_slots,
        )
        with self._lock:
            self._targets[key] = target
        deprecated = getattr(target, "deprecated", ())
        if deprecated:
            # A worker's stderr is no author's terminal: the assay's events carry the warning.
            with contextlib.suppress(*DATABASE_ERRORS):
                shards.record_deprecated(self.engine, inputs, list(deprecated))
        notice = getattr(target, "notice", None)
        if notice:
            log.info(notice, extra={"assay_id": str(assay_id)})
        return target

    def _held_values(self, assay_id: uuid.UUID) -> set[str]:
        """Every secret value a sandbox of the assay was loaded with in this process."""
        found = self._values.setdefault(assay_id, set())
        while len(self._values) > 256:
            self._values.pop(next(iter(self._values)))
        return found

    def end_assay(self, assay_id: uuid.UUID, ended: RightEnded) -> None:
        """End the assay's sandboxes now (every tree killed, none built again under its
        tenure) and drop its targets; an assay whose tenant lost the right fails saying so."""
        holding = self.warden.drop(assay_id)
        if holding is None:
            return
        if ended.fails:
            # Failed first: a shard whose trials die with the sandbox must not be decided on them.
            with contextlib.suppress(*DATABASE_ERRORS):  # a shard that starts is refused anyway
                shards.fail(self.engine, assay_id, f"tenant code stopped: {ended.reason}")
        holding.tenure.end(ended.reason)
        with self._lock:
            gone = [self._targets.pop(k) for k in holding.keys if k in self._targets]
        for target in gone:
            with contextlib.suppress(Exception):  # the trees are dead; the rest is the gate's
                close_target(target)
        log.warning(
            "tenant code's sandboxes ended: %s", ended.reason, extra={"assay_id": str(assay_id)}
        )

    def secrets(self, inputs: AssayInputs, manifest: Manifest) -> Mapping[str, str]:
        """The tenant's named secrets the manifest asks for, decrypted for its sandboxed code
        only (the operator's key is read once per process; a worker never creates it)."""
        if not manifest.target.secrets:
            return {}
        if self._secrets_key is None:
            assert self.settings.secrets_key_file is not None  # settings derive it
            self._secrets_key = load_secrets_key(self.settings.secrets_key_file)
        with Session(self.engine) as session:
            return secrets_for(
                session, inputs.tenant_id, manifest.target.secrets, self._secrets_key
            )

    def redactor(self, inputs: AssayInputs, manifest: Manifest) -> Redactor:
        """What blanks the tenant's secrets the manifest names from a shard's result before it
        is stored (only a tenant worker decrypts any; nothing to blank elsewhere)."""
        if not (manifest.target.secrets and runs_code(manifest)):
            return Redactor()
        # Every value a sandbox of the assay held here (a rotated secret's old one too), and
        # the values as stored now: whichever the code saw, neither is written.
        values = set(self._values.get(inputs.assay_id, ()))
        with contextlib.suppress(SecretMissing):  # deleted: what the sandboxes held remains
            values.update(self.secrets(inputs, manifest).values())
        return Redactor(values)

    def _waiting(self, assay_id: uuid.UUID, inputs: AssayInputs | None) -> Callable[[str], None]:
        """Where a trial waiting for its world says so: a log line and the assay's events."""

        def waiting(note: str) -> None:
            log.warning(note, extra={"assay_id": str(assay_id)})
            if inputs is None:
                return
            with contextlib.suppress(*DATABASE_ERRORS):  # the log line stands; the wait goes on
                shards.record_waiting(self.engine, inputs, note)

        return waiting

    def stop_flag(self, assay_id: uuid.UUID, every_s: float = 0.2) -> Callable[[], bool]:
        """Polled between batches of trials: has a stop been recorded? At most every `every_s`.
        A database that does not answer is not a stop: the shard keeps running (the engine needs
        no database) and reads the flag again once it answers."""
        last = [0.0]

        def stopped() -> bool:
            now = time.monotonic()
            if now - last[0] < every_s:
                return False
            last[0] = now
            try:
                return shards.stop_reason(self.engine, assay_id) is not None
            except DATABASE_ERRORS:
                return False

        return stopped

    def assay(self, assay_id: uuid.UUID) -> Parsed | None:
        """The parsed inputs of an assay, refusing a stored manifest whose digest moved."""
        cached = self._assays.get(assay_id)
        if cached is not None:
            self._assays.move_to_end(assay_id)
            return cached
        inputs = shards.inputs(self.engine, assay_id)
        if inputs is None:
            return None
        manifest = parse_manifest(inputs.manifest)
        if manifest.digest() != inputs.manifest_digest:
            raise RuntimeError(
                f"stored manifest {inputs.manifest_digest} re-parses to {manifest.digest()}"
            )
        parsed = Parsed(inputs, manifest, parse_plan(inputs.plan))
        self._assays[assay_id] = parsed
        if len(self._assays) > 256:
            self._assays.popitem(last=False)
        return parsed
