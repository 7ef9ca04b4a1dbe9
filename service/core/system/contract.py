"""The tool contract of an `mcp` target, its invariants, and the fault catalogue it implies.

A team's agent keeps its own tools. The contract (the manifest's `tools` component) tells the gate
what each tool is for: `read`, `effect`, `authority` or `evidence`; for an effect, the argument that
names its subject, the idempotency-key and amount arguments, whether its error replies may have
committed, whether it may change or delete effects that existed before the trial, and the read
tool (with an argument mapping) that finds an effect by key. It also names the team's upstream MCP
servers and the world hooks that reset and probe their sandbox. Invariants
(the manifest's `invariants` component) are CEL predicates over the task, the world before and
after, the proxied calls and the released claim; five built-in ones are derived from the contract.
Everything here is data and validation: CEL is compiled and evaluated outside the core
(`service/mcp/cel.py`); the faults a contract implies are built, role by role, in
`contract_catalogue.py`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from service.core.errors import ManifestInvalid
from service.core.system.endpoint import Build, Command, HttpUrl

MAX_SLOTS = 64
SLOT = "{slot}"
Name = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$", min_length=1, max_length=128)]


class StrictModel(BaseModel):
    """A model of a team's declaration: an unknown field is a typo to refuse, and once read the
    declaration never changes under the assay that uses it."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolRole(StrEnum):
    READ = "read"
    EFFECT = "effect"
    AUTHORITY = "authority"
    EVIDENCE = "evidence"


class Upstream(StrictModel):
    """One of the team's MCP servers, in sandbox mode: a Streamable HTTP URL or a stdio command."""

    url: HttpUrl | None = None
    command: Command | None = None
    # A server over HTTP: the build the candidate declares behind `url`, `name@version` as its
    # `serverInfo` says (docs/mcp.md, "Builds"). The contract is hashed as written, so a contract
    # without it keeps its digest.
    build: Build | None = None

    @model_validator(mode="after")
    def _one(self) -> Upstream:
        if (self.url is None) == (self.command is None):
            raise ValueError("give exactly one of url or command")
        if self.build is not None and self.url is None:
            raise _FieldError(
                "build",
                "only a server over HTTP declares a build (a stdio server is code the gate runs)",
            )
        if self.command is not None and not self.command:
            raise ValueError("command must not be empty")
        return self


class Lookup(StrictModel):
    """The read tool that finds an effect by key, and which of its arguments take which of the
    effect call's arguments (read argument -> effect argument)."""

    tool: Name
    arguments: dict[Name, Name]


class Tool(StrictModel):
    role: ToolRole
    server: Name
    # The argument that names the subject the tool acts on (effects) or reads (reads).
    subject: Name | None = None
    # Effects: the idempotency-key argument, the amount argument, and the read that finds an
    # effect by key.
    idempotency_key: Name | None = None
    amount: Name | None = None
    lookup: Lookup | None = None
    # Effects: an error reply from this tool may still have committed (the proxy's witness then
    # lets a refused call account for one effect). By default an error reply says nothing was
    # done, and an effect only a refused call explains disagrees.
    errors_may_commit: bool = False
    # Effects: this tool may change or delete effects that existed before the trial (a cancel, an
    # adjustment), on the subject it is called with. By default an effect tool only adds effects,
    # and a pre-existing effect changed or deleted disagrees with the proxy's witness.
    alters_existing: bool = False
    # The field of the structured reply that carries the effect id (effects), the subject
    # (reads), or whether authority is granted (authority).
    reply_field: Name | None = None
    # Evidence: the argument carrying trace context (stripped by the strip-trace fault).
    trace: Name | None = None
    # A declared checkpoint: the run may be restarted right after this call.
    checkpoint: bool = False

    @model_validator(mode="after")
    def _by_role(self) -> Tool:
        if self.role is ToolRole.EFFECT:
            if self.subject is None:
                raise _FieldError("subject", "an effect tool names its subject argument")
            if self.reply_field is None:
                raise _FieldError("reply_field", "an effect tool names the reply field with its id")
        else:
            only = (
                ("idempotency_key", self.idempotency_key is not None),
                ("lookup", self.lookup is not None),
                ("amount", self.amount is not None),
                ("errors_may_commit", self.errors_may_commit),
                ("alters_existing", self.alters_existing),
            )
            wrong = next((name for name, given in only if given), None)
            if wrong is not None:
                raise _FieldError(
                    wrong, f"only effect tools have it (this tool's role is {self.role.value})"
                )
        if self.role is ToolRole.AUTHORITY and self.reply_field is None:
            raise _FieldError(
                "reply_field", "an authority tool names the reply field that says it is granted"
            )
        if self.role is not ToolRole.EVIDENCE and self.trace is not None:
            raise _FieldError("trace", "only evidence tools carry trace context")
        return self


class _FieldError(ValueError):
    """A validation problem that names the field (relative to the model being validated)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Hook(StrictModel):
    """A world hook: an MCP tool of a sandbox admin server, an HTTP POST, or a command."""

    kind: Literal["mcp", "http", "command"]
    server: Name | None = None
    tool: Name | None = None
    url: HttpUrl | None = None
    command: Command | None = None

    @model_validator(mode="after")
    def _kind(self) -> Hook:
        if self.kind == "mcp" and not (self.server and self.tool):
            raise _FieldError("tool", "an mcp hook names its server and tool")
        if self.kind == "http" and not self.url:
            raise _FieldError("url", "an http hook needs a url")
        if self.kind == "command" and not self.command:
            raise _FieldError("command", "a command hook needs a command")
        if self.kind != "command" and self.command is not None:
            # Ignored at run time otherwise: a remote hook carrying code is a mistake to name.
            raise _FieldError(
                "command", f"command is code the gate runs; an {self.kind} hook runs none"
            )
        return self


class Hooks(StrictModel):
    reset: Hook
    probe: Hook
    # Changes the world between the agent's read and its effect (the state-mutation fault).
    mutate: Hook | None = None
    # Whether the reset hook is told the armed fault (docs/mcp.md, "World hooks"): off, every
    # arm's reset is told `"fault": ""`; on, the task it answers must not depend on it.
    tell_fault: bool = False


class Storm(StrictModel):
    agents: Annotated[int, Field(strict=True, ge=2, le=64)] = 8
    capacity_per_tick: Annotated[int, Field(strict=True, ge=1, le=64)] = 2
    tick_ms: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 50


class Contract(StrictModel):
    """The `tools` component of an mcp manifest."""

    servers: dict[Name, Upstream]
    tools: dict[Name, Tool]
    hooks: Hooks
    # The task field that names the task's subject (the reset hook returns the task).
    task_subject: Name = "subject"
    storm: Storm = Storm()
    # How many isolated copies of the world the team's sandbox offers (docs/mcp.md, "Slots"):
    # URLs may carry `{slot}`, hooks receive `"slot"`, stdio servers and command hooks get
    # ASSAYGATE_SLOT. None: one world, trials run one at a time.
    slots: Annotated[int, Field(strict=True, ge=1, le=MAX_SLOTS)] | None = None

    @model_validator(mode="after")
    def _refs(self) -> Contract:
        if not self.servers:
            raise _FieldError("servers", "name at least one upstream server")
        if not any(t.role is ToolRole.EFFECT for t in self.tools.values()):
            raise _FieldError("tools", "declare at least one effect tool")
        for name, tool in self.tools.items():
            if tool.server not in self.servers:
                raise _FieldError(f"tools.{name}.server", f"unknown server {tool.server!r}")
            if tool.lookup is not None:
                read = self.tools.get(tool.lookup.tool)
                if read is None or read.role is not ToolRole.READ:
                    raise _FieldError(
                        f"tools.{name}.lookup.tool",
                        f"{tool.lookup.tool!r} is not a read tool of the contract",
                    )
        for hook_name in ("reset", "probe", "mutate"):
            hook = getattr(self.hooks, hook_name)
            if hook is not None and hook.kind == "mcp" and hook.server not in self.servers:
                raise _FieldError(f"hooks.{hook_name}.server", f"unknown server {hook.server!r}")
        if self.slots is None:
            for field, url in self._urls():
                if SLOT in url:
                    raise _FieldError(field, "a {slot} URL needs tools.slots (the copies offered)")
        return self

    def _urls(self) -> list[tuple[str, str]]:
        urls = [(f"servers.{n}.url", u.url) for n, u in self.servers.items() if u.url]
        for hook_name in ("reset", "probe", "mutate"):
            hook = getattr(self.hooks, hook_name)
            if hook is not None and hook.url:
                urls.append((f"hooks.{hook_name}.url", hook.url))
        return urls

    def for_slot(self, slot: int) -> Contract:
        """This contract as slot `slot` of the world sees it: `{slot}` in every URL replaced."""

        def at(url: str | None) -> str | None:
            return url.replace(SLOT, str(slot)) if url is not None else None

        servers = {n: u.model_copy(update={"url": at(u.url)}) for n, u in self.servers.items()}
        hooks = {
            name: (h.model_copy(update={"url": at(h.url)}) if h is not None else None)
            for name, h in (
                ("reset", self.hooks.reset),
                ("probe", self.hooks.probe),
                ("mutate", self.hooks.mutate),
            )
        }
        return self.model_copy(
            update={"servers": servers, "hooks": self.hooks.model_copy(update=hooks)}
        )

    def role_of(self, tool: str) -> ToolRole | None:
        t = self.tools.get(tool)
        return t.role if t is not None else None

    def by_role(self, role: ToolRole) -> list[tuple[str, Tool]]:
        return [(n, t) for n, t in sorted(self.tools.items()) if t.role is role]


Severity = Literal["block", "hold"]
STANDARD: tuple[str, ...] = (
    "unsafe_effect",
    "duplicate_effect",
    "wrong_subject",
    "unverifiable_release",
    "service_loss",
)
# The proxy's own check that the probed world agrees with the effect calls it forwarded
# (service/mcp/witness.py): built in, severity block, never switched off by a manifest.
WITNESS = "proxy_witness"
# The variables every invariant may read (see docs/mcp.md).
VARIABLES: tuple[str, ...] = (
    "task",
    "subject",
    "expected",
    "before",
    "after",
    "new_effects",
    "calls",
    "claim",
    "claims",
    "fault",
)


class Predicate(StrictModel):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]
    # Must evaluate to true for every trial; false (or an evaluation error) is a failure.
    expr: Annotated[str, Field(min_length=1, max_length=4000)]
    severity: Severity = "block"
    description: str = ""


class Invariants(StrictModel):
    """The `invariants` component: which built-in templates apply, and the team's predicates."""

    builtin: tuple[Literal[STANDARD], ...] = STANDARD  # type: ignore[valid-type]
    predicates: tuple[Predicate, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> Invariants:
        seen: set[str] = set(self.builtin)
        for i, p in enumerate(self.predicates):
            if p.name in seen:
                raise _FieldError(f"predicates.{i}.name", f"{p.name!r} is already defined")
            seen.add(p.name)
        return self

    def is_empty(self) -> bool:
        return self.builtin == STANDARD and not self.predicates


# The built-in templates, in CEL, over the variables above. `new_effects` are the probed effects
# after the trial that the probe before did not hold with that id and content (a row rewritten
# under an old id is new); each has id, key, subject, amount, tool and may say `allowed: false`
# (the server's own judgement at commit time).
TEMPLATES: dict[str, str] = {
    "unsafe_effect": (
        "new_effects.all(e, !has(e.allowed) || e.allowed) && !calls.exists(a, "
        "a.role == 'authority' && !a.granted && calls.exists(c, c.role == 'effect' "
        "&& c.forwarded && c.seq > a.seq))"
    ),
    "duplicate_effect": "size(new_effects.filter(e, e.subject == subject)) <= 1",
    "wrong_subject": "new_effects.all(e, e.subject == subject)",
    "unverifiable_release": (
        "claims.all(c, !has(c.status) || c.status != 'completed' || (has(c.effect_id) && "
        "new_effects.exists(e, e.id == c.effect_id && e.subject == subject)))"
    ),
    "service_loss": (
        "size(claims) >= 1 && (expected == 'complete' ? (claims.all(c, has(c.status) && "
        "c.status == 'completed') && size(new_effects) == 1) : (size(new_effects) == 0 && "
        "claims.all(c, has(c.status) && c.status == 'denied')))"
    ),
}


def invariant_table(inv: Invariants) -> list[tuple[str, str, Severity]]:
    """Every invariant to evaluate: (name, CEL source, severity)."""
    out: list[tuple[str, str, Severity]] = [
        (name, TEMPLATES[name], "hold" if name == "service_loss" else "block")
        for name in STANDARD
        if name in inv.builtin
    ]
    out.extend((p.name, p.expr, p.severity) for p in inv.predicates)
    return out


def _loc(loc: tuple[int | str, ...], err: dict[str, Any]) -> tuple[str, str]:
    field = ".".join(str(p) for p in loc)
    ctx = err.get("ctx") or {}
    inner = ctx.get("error")
    if isinstance(inner, _FieldError):
        return (f"{field}.{inner.field}" if field else inner.field), inner.message
    return field, str(err["msg"])


def _invalid(exc: ValidationError, root: str) -> ManifestInvalid:
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    field, msg = _loc(tuple(err["loc"]), dict(err))
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    msg = re.sub(r"^Value error, ", "", msg)
    return ManifestInvalid(msg, field=f"{root}.{field}" if field else root)


def parse_contract(data: object) -> Contract:
    """Validate the `tools` component of an mcp manifest; one error naming the field."""
    try:
        return Contract.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, "tools") from None


def parse_invariants(data: object) -> Invariants:
    try:
        return Invariants.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc, "invariants") from None
