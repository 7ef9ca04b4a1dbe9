"""The configuration manifest: the configured system, frozen and hashed.

Each component is hashed as SHA-256 over its RFC 8785 canonical JSON; the manifest digest is the
SHA-256 over the canonical JSON of the component-hash map. Unknown keys are errors, never dropped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

import rfc8785
from pydantic import (
    BaseModel,
    Field,
    JsonValue,
    PrivateAttr,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from service.core.errors import ManifestInvalid
from service.core.system.contract import (
    Contract,
    Invariants,
    StrictModel,
    parse_contract,
    parse_invariants,
)
from service.core.system.control import Control
from service.core.system.endpoint import Build, Command, Entrypoint, HttpUrl, slot_build
from service.core.system.execution import Execution, Part, parts
from service.core.system.secret import NAME_PATTERN as VARIABLE_NAME_PATTERN
from service.core.system.text import (
    LINE_PATTERN,
    PATTERN_RULES,
    SYSTEM_NAME_MAX,
    SYSTEM_NAME_PATTERN,
    TextInvalid,
    check_text,
)
from service.core.system.values import INTEGRAL, POINT_CONTAINED, Number
from service.core.system.values import SERVICE_FLOORS as SERVICE_FLOORS
from service.core.system.values import Envelope as Envelope
from service.core.system.values import Floors as Floors
from service.core.system.values import Rate as Rate

COMPONENTS: tuple[str, ...] = (
    "model",
    "prompt",
    "policy",
    "tools",
    "retry",
    "state_schema",
    "evidence_routes",
    "orchestration",
    "controls",
    "target",
    "envelope",
    "invariants",
)
#: Not a manifest component: the candidate's code artifact, by digest. A production change may
#: report it (`code` with the deployed artifact's SHA-256) and a trigger may watch it, as a
#: manifest component's hash; a candidate with no artifact has none.
CODE = "code"
TRIGGER_COMPONENTS: tuple[str, ...] = (*COMPONENTS, CODE)
TRIGGER_DEFAULT: tuple[str, ...] = ("tools", "policy", "retry", "invariants", CODE)
# Components and fields added after manifests were first hashed: left out of the hashes while
# they hold their default, so every earlier manifest keeps its digest.
_OPTIONAL_COMPONENTS = frozenset({"invariants"})
_OPTIONAL_FIELDS: dict[str, tuple[str, ...]] = {
    "target": ("runner", "secrets", "env", "build"),
    "envelope": ("attribution",),
}


class ControlSet(StrictModel):
    """Declared controls. A control left out is not claimed (off)."""

    bind_identity: StrictBool = False
    pre_effect_authority: StrictBool = False
    refresh_context: StrictBool = False
    state_precondition: StrictBool = False
    idempotency: StrictBool = False
    effect_readback: StrictBool = False
    evidence_gate: StrictBool = False
    evidence_repair: StrictBool = False

    def enabled(self) -> frozenset[Control]:
        return frozenset(c for c in Control if getattr(self, c.value))


class RetryBudget(StrictModel):
    """A token bucket shared by every agent of the fleet: a retry spends a token."""

    capacity: Annotated[int, Field(strict=True, ge=1, le=100_000), INTEGRAL]
    refill_per_s: Annotated[Number, Field(gt=0, le=100_000)]


class RetryPolicy(StrictModel):
    max_attempts: Annotated[int, Field(strict=True, ge=1, le=20), INTEGRAL] = 3
    backoff_ms: Annotated[int, Field(strict=True, ge=0, le=600_000), INTEGRAL] = 1000
    jitter: Literal["none", "full"] = "none"
    budget: RetryBudget | None = None


class Orchestration(StrictModel):
    # "deny": refuse every action after any warning (the paper's fail-closed counterexample).
    on_warning: Literal["recover", "deny"] = "recover"
    # The customer journey must finish within this much virtual time to count as useful service.
    deadline_ms: Annotated[int, Field(strict=True, ge=1, le=86_400_000), INTEGRAL] = 60_000
    graph: JsonValue = None


#: Which kinds carry which code field. A code field on another kind (a remote runner or target with
#: a `command` or `entrypoint`) would be ignored at run time: refused, naming it, instead.
RUNNER_CODE: dict[str, tuple[str, ...]] = {
    "command": ("command",),
    "entrypoint": ("python", "langgraph", "openai-agents"),
}
TARGET_CODE: dict[str, tuple[str, ...]] = {"entrypoint": ("python",)}


def _code_field(
    value: Any, info: ValidationInfo, kinds: dict[str, tuple[str, ...]], noun: str
) -> Any:
    kind = info.data.get("kind")
    field = str(info.field_name)
    if value is not None and kind is not None and kind not in kinds[field]:
        raise ValueError(
            f"{field} is code the gate runs; a {kind} {noun} runs none (only "
            f"{' or '.join(kinds[field])} {noun}s take a {field})"
        )
    return value


class Runner(StrictModel):
    """How an `mcp` target's agent is started for a trial (it reaches its tools through the proxy).

    `command`: one process per trial, the task JSON on stdin, the proxy's URL in
    `ASSAYGATE_MCP_URL`, the claim JSON on stdout. `http`: the task and the URL are POSTed to
    `url` and the reply is the claim. `python`: `module:callable(task, mcp_url) -> claim`, run in a
    child process. `langgraph`: a compiled graph (or a builder of one from the tools) and
    `openai-agents`: an `Agent`, each as `entrypoint` `module:attribute`, run in a child process
    with its tools on the proxy (docs/frameworks.md)."""

    kind: Literal["command", "http", "python", "langgraph", "openai-agents"]
    command: Command | None = None
    url: HttpUrl | None = None
    entrypoint: Entrypoint | None = None
    # The wall-clock deadline of one run of the agent.
    deadline_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # A command runner's protocol: `once`, a process per run; `lines`, one warm process per slot
    # reading a JSON task a line and answering a claim line (docs/mcp.md). Left out of the
    # component's hash at its default, so existing manifests keep their digests.
    protocol: Literal["once", "lines"] = Field(default="once", exclude_if=lambda v: v == "once")
    # An http runner: the build the candidate declares behind `url`, compared with the
    # `Assaygate-Build` header of every reply (docs/mcp.md, "Builds"). Left out of the hash unset.
    build: Build | None = Field(default=None, exclude_if=lambda v: v is None)

    @field_validator("command", "entrypoint")
    @classmethod
    def _code_of_its_kind(cls, value: Any, info: ValidationInfo) -> Any:
        return _code_field(value, info, RUNNER_CODE, "runner")

    @model_validator(mode="after")
    def _kind_fields(self) -> Runner:
        if self.kind == "command" and not self.command:
            raise ValueError("a command runner needs a command")
        if self.build is not None and self.kind != "http":
            raise ValueError(
                "only an http runner declares a build (code the gate runs is recorded by what "
                "it runs, not by what it says)"
            )
        if self.protocol != "once" and self.kind != "command":
            raise ValueError("only a command runner has a protocol")
        if self.kind == "http" and not self.url:
            raise ValueError("an http runner needs a url")
        if self.kind == "python" and not (self.entrypoint and ":" in self.entrypoint):
            raise ValueError("a python runner needs entrypoint 'module:callable'")
        if self.kind in ("langgraph", "openai-agents") and not (
            self.entrypoint and ":" in self.entrypoint
        ):
            raise ValueError(f"a {self.kind} runner needs entrypoint 'module:attribute'")
        return self


VariableName = Annotated[str, Field(pattern=VARIABLE_NAME_PATTERN)]
# Names the sandbox sets itself (and the gate's own prefix): never the manifest's to declare.
RESERVED_VARIABLES = frozenset(
    {"PATH", "HOME", "LANG", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"}
)
MAX_ENV_VALUE_BYTES = 4096


class TargetSpec(StrictModel):
    kind: Literal["reference", "python", "http", "mcp"] = "reference"
    entrypoint: Entrypoint | None = None
    url: HttpUrl | None = None
    # Controls this target cannot switch off for a counterfactual run.
    cannot_disable: tuple[Control, ...] = ()
    # mcp targets: how the agent is started.
    runner: Runner | None = None
    # Targets that run code: the tenant's secrets its code sees as variables, by name only (the
    # values are stored encrypted, PUT /v1/secrets/{name}), and declared variables that are not
    # secret. Refused for a manifest that runs no code of the tenant's (`parse_manifest`).
    secrets: Annotated[tuple[VariableName, ...], Field(max_length=32)] = ()
    env: Annotated[
        dict[VariableName, Annotated[str, Field(max_length=MAX_ENV_VALUE_BYTES)]],
        Field(max_length=64),
    ] = Field(default_factory=dict)
    # An http target: the build the candidate declares behind `url`, compared with the
    # `Assaygate-Build` header of the agent's every reply (docs/targets.md, "Builds").
    build: Build | None = None

    @field_validator("entrypoint")
    @classmethod
    def _code_of_its_kind(cls, value: Any, info: ValidationInfo) -> Any:
        return _code_field(value, info, TARGET_CODE, "target")

    @model_validator(mode="after")
    def _kind_fields(self) -> TargetSpec:
        if self.build is not None and self.kind != "http":
            raise ValueError(
                "only an http target declares target.build (an mcp target declares its http "
                "runner's as target.runner.build and a server's as tools.servers.<name>.build)"
            )
        if self.kind == "python" and not (self.entrypoint and ":" in self.entrypoint):
            raise ValueError("a python target needs entrypoint 'module:callable'")
        if self.kind == "http" and not self.url:
            raise ValueError("an http target needs a url")
        if self.kind == "mcp" and self.runner is None:
            raise ValueError("an mcp target needs a runner")
        if self.kind != "mcp" and self.runner is not None:
            raise ValueError("only an mcp target has a runner")
        return self

    @field_validator("secrets", "env")
    @classmethod
    def _variables(cls, value: Any, info: ValidationInfo) -> Any:
        names = list(value)
        if len(set(names)) != len(names):
            raise ValueError("names a secret twice")
        for name in names:
            if name in RESERVED_VARIABLES or name.startswith("ASSAYGATE_"):
                raise ValueError(f"{name} is set by the sandbox; choose another name")
        if info.field_name == "env":
            both = sorted(set(info.data.get("secrets", ())) & set(names))
            if both:
                raise ValueError(f"{both[0]} is both a secret and a declared variable")
            for name, text in value.items():
                if len(text.encode()) > MAX_ENV_VALUE_BYTES:
                    raise ValueError(f"the value of {name} is over {MAX_ENV_VALUE_BYTES} bytes")
        return value


class Manifest(StrictModel):
    system: (
        Annotated[str, Field(min_length=1, max_length=SYSTEM_NAME_MAX, pattern=SYSTEM_NAME_PATTERN)]
        | None
    ) = None
    version: Annotated[str, Field(min_length=1, max_length=200, pattern=LINE_PATTERN)] | None = None
    model: dict[str, JsonValue]
    prompt: JsonValue
    policy: dict[str, JsonValue]
    tools: dict[str, JsonValue]
    retry: RetryPolicy
    state_schema: dict[str, JsonValue] = Field(default_factory=dict)
    evidence_routes: dict[str, JsonValue] = Field(default_factory=dict)
    orchestration: Orchestration = Orchestration()
    controls: ControlSet
    target: TargetSpec = TargetSpec()
    envelope: Envelope = Envelope()
    # mcp targets: CEL invariants (validated as `contract.Invariants`; empty: the built-ins).
    invariants: dict[str, JsonValue] = Field(default_factory=dict)
    # What the manifest means, derived once per manifest (`contract_of`, `invariants_of`,
    # `parts_of`): admission, the egress check, the engine and the decision read one reading.
    _contract: Contract | None = PrivateAttr(default=None)
    _invariants: Invariants | None = PrivateAttr(default=None)
    _parts: tuple[Part, ...] | None = PrivateAttr(default=None)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        if update:
            # Another manifest: what this one meant is read again from its own fields.
            copied._contract, copied._invariants, copied._parts = None, None, None
        return copied

    def component(self, name: str) -> Any:
        value = getattr(self, name)
        if isinstance(value, BaseModel):
            dumped: dict[str, Any] = value.model_dump(mode="json")
            for f in _OPTIONAL_FIELDS.get(name, ()):
                if dumped.get(f) in (type(value).model_fields[f].default, [], {}):
                    dumped.pop(f, None)
            if name == "envelope" and dumped["floor_on"] == "point":
                # On the point estimate an unset containment floor is the 0.99 it always was:
                # the same rule keeps its digest.
                floors = dumped["floors"]
                floors["contained"] = (
                    POINT_CONTAINED if floors["contained"] is None else floors["contained"]
                )
            return dumped
        return value

    def component_hashes(self) -> dict[str, str]:
        return {
            name: sha256_canonical(self.component(name))
            for name in COMPONENTS
            if name not in _OPTIONAL_COMPONENTS or self.component(name)
        }

    def digest(self) -> str:
        return sha256_canonical(self.component_hashes())


def canonical(value: Any) -> bytes:
    return rfc8785.dumps(value)


def sha256_canonical(value: Any) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "manifest"


MAX_DEPTH = 32
MAX_NODES = 20_000


def _shape(value: object, field: str, depth: int = 0, budget: list[int] | None = None) -> None:
    """Refuse documents nested deeper than MAX_DEPTH or larger than MAX_NODES values.

    Walked iteratively enough to stay far from the interpreter's recursion limit.
    """
    budget = budget if budget is not None else [MAX_NODES]
    stack: list[tuple[object, int]] = [(value, depth)]
    while stack:
        node, d = stack.pop()
        budget[0] -= 1
        if budget[0] < 0:
            raise ManifestInvalid(f"more than {MAX_NODES} values", field=field)
        if d > MAX_DEPTH:
            raise ManifestInvalid(f"nested deeper than {MAX_DEPTH} levels", field=field)
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)


def contract_of(manifest: Manifest) -> Contract:
    """The tool contract, parsed once per manifest."""
    if manifest._contract is None:
        manifest._contract = parse_contract(manifest.tools)
    return manifest._contract


def invariants_of(manifest: Manifest) -> Invariants:
    """The invariants, parsed once per manifest."""
    if manifest._invariants is None:
        manifest._invariants = parse_invariants(manifest.invariants)
    return manifest._invariants


def parts_of(manifest: Manifest) -> tuple[Part, ...]:
    """Every part of the manifest the gate would call or run, in field order (once per
    manifest)."""
    if manifest._parts is None:
        target = manifest.target
        if target.kind != "mcp":
            manifest._parts = parts(target.kind, None, None)
        else:
            assert target.runner is not None  # the target's validator requires it
            manifest._parts = parts(target.kind, target.runner.kind, contract_of(manifest))
    return manifest._parts


# The remote endpoint an http target's agent, or an mcp target's http runner, answers at.
TARGET_ENDPOINT = "target"
RUNNER_ENDPOINT = "target.runner"


def server_endpoint(name: str) -> str:
    """The endpoint name of an mcp target's upstream server (its manifest field)."""
    return f"tools.servers.{name}"


def build_endpoints(manifest: Manifest) -> dict[str, str | None]:
    """Every remote endpoint that reports its build (by its manifest field: `target`,
    `target.runner`, `tools.servers.<name>`) and the build the candidate declared for it (None:
    none). Code the gate runs (python targets, command runners, stdio servers) has none. In a
    world that offers slots a server's declared build is read as its reports are, its per-slot
    number written `{slot}` (`endpoint.slot_build`)."""
    target = manifest.target
    if target.kind == "http":
        return {TARGET_ENDPOINT: target.build}
    if target.kind != "mcp":
        return {}
    assert target.runner is not None  # the target's validator requires it
    out: dict[str, str | None] = {}
    if target.runner.kind == "http":
        out[RUNNER_ENDPOINT] = target.runner.build
    contract = contract_of(manifest)
    for name, up in sorted(contract.servers.items()):
        if up.url is not None:
            build = up.build
            if build is not None and contract.slots is not None:
                build = slot_build(build)
            out[server_endpoint(name)] = build
    return out


def code_parts(manifest: Manifest) -> tuple[Part, ...]:
    """The parts that are the tenant's code (empty: the manifest runs nothing of the tenant's)."""
    return tuple(p for p in parts_of(manifest) if p.execution is Execution.CODE)


def runs_code(manifest: Manifest) -> bool:
    return bool(code_parts(manifest))


def parse_manifest(data: object) -> Manifest:
    """Validate a decoded manifest; the first problem becomes a ManifestInvalid naming its field."""
    if not isinstance(data, dict):
        raise ManifestInvalid("must be a JSON object", field="manifest")
    budget = [MAX_NODES]
    for key, value in data.items():
        _shape(value, str(key), 1, budget)
    try:
        check_text(data, "")
    except TextInvalid as exc:
        raise ManifestInvalid(exc.message, field=exc.field or "manifest") from None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # An unknown key explains the rest (a misspelt component is also "missing"): report it.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        field = _field(tuple(err["loc"]))
        if err["type"] == "extra_forbidden":
            parent = field.rsplit(".", 1)[0] if "." in field else "manifest"
            if parent == "controls":
                known = ", ".join(c.value for c in Control)
                raise ManifestInvalid(f"unknown control (known: {known})", field=field) from None
            raise ManifestInvalid(f"unknown key in {parent}", field=field) from None
        pattern = (err.get("ctx") or {}).get("pattern")
        message = PATTERN_RULES.get(str(pattern), err["msg"]) if pattern else err["msg"]
        raise ManifestInvalid(message, field=field) from None
    for name in COMPONENTS:
        try:
            canonical(manifest.component(name))
        except rfc8785.CanonicalizationError as exc:
            # RFC 8785 hashes only I-JSON: integers within 2^53 - 1 and finite numbers.
            raise ManifestInvalid(f"not canonicalisable JSON: {exc}", field=name) from None
    if manifest.target.kind == "mcp":
        contract_of(manifest)
        invariants_of(manifest)
    elif manifest.invariants:
        raise ManifestInvalid("invariants apply to mcp targets only", field="invariants")
    for field in ("secrets", "env"):
        if getattr(manifest.target, field) and not code_parts(manifest):
            raise ManifestInvalid(
                f"{field} are for targets that run code (a python target, or an mcp target "
                "whose runner, servers or hooks are code); this manifest runs none",
                field=f"target.{field}",
            )
    return manifest


def parse_manifest_json(text: str | bytes) -> Manifest:
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestInvalid(f"malformed JSON: {exc}", field="manifest") from None
    return parse_manifest(data)
