"""The OpenAPI document, made to say exactly what the service accepts.

FastAPI derives most of it from the request models; this adds what they cannot say by
themselves, so that a client (or schemathesis) that follows the document is never refused:

- public routes (`/healthz`, `/readyz`, `GET /v1/keys`) need no key: no `security`, no 401/403;
- the manifest's own schema (from `service.core.system.manifest.Manifest`), with the rules the core
  checks beyond its models: I-JSON values (integers within ±(2^53 − 1)), no control characters
  in any string or key (`service.core.system.text`), a python target's `entrypoint` and an http
  target's `url`, and a system and a version named in the body or in the manifest;
- the plan's limits as this deployment configures them, and no `modes` in paper mode;
- the control-character rule on every string of every request: path and query values are one
  line, body text may hold tabs and line breaks;
- a new system's name pattern on the route that creates one (`PUT /v1/systems/{system}/triggers`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from service.core.faults.catalogue import catalogue_named
from service.core.system.contract import Contract
from service.core.system.manifest import Manifest
from service.core.system.text import CONTROL_CLASS, SYSTEM_NAME_PATTERN, TEXT_PATTERN
from service.http.access import PUBLIC
from service.settings import Settings

#: A path or query value: no control character at all (not even TAB, LF or CR).
PARAMETER_PATTERN = "^[^\\x00-\\x1f\\x7f-\\x9f]*$"
JSON_SAFE_INTEGER = 2**53 - 1
_REF = "#/components/schemas/"
_MANIFEST_PREFIX = "Manifest"


def refine(schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Refine FastAPI's document in place (and return it)."""
    components: dict[str, Any] = schema.setdefault("components", {}).setdefault("schemas", {})
    _public_routes_need_no_key(schema)
    _manifest(components)
    _plan(components, settings)
    _text_rule(schema, components)
    _published_names(schema, components)
    return schema


#: Components renamed in the code (one name per concept) keep the names clients were generated
#: from: the document is an interface, the class name is not.
_PUBLISHED = {
    "KeyRole": "Role",
    "ReasonView": "Reason",
    f"{_MANIFEST_PREFIX}ToolRole": f"{_MANIFEST_PREFIX}Role",
}


def _published_names(schema: dict[str, Any], components: dict[str, Any]) -> None:
    for code_name, published in _PUBLISHED.items():
        if code_name in components:
            components[published] = components.pop(code_name)
            components[published]["title"] = published.removeprefix(_MANIFEST_PREFIX)
    refs = {f"{_REF}{old}": f"{_REF}{new}" for old, new in _PUBLISHED.items()}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("$ref") in refs:
                node["$ref"] = refs[node["$ref"]]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)


def _operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if isinstance(operation, dict):
                yield method.upper(), path, operation


def _public_routes_need_no_key(schema: dict[str, Any]) -> None:
    for method, path, operation in _operations(schema):
        if (method, path) in PUBLIC:
            operation.pop("security", None)
            for status in ("401", "403"):
                operation.get("responses", {}).pop(status, None)


# ------------------------------------------------------------------------------ the manifest


def _json_value() -> dict[str, Any]:
    """Any JSON value RFC 8785 can hash, with no control character in a string or a key."""
    ref = {"$ref": f"{_REF}{_MANIFEST_PREFIX}JsonValue"}
    return {
        "description": "Any I-JSON value: integers within ±(2^53 − 1), no control characters",
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "integer", "minimum": -JSON_SAFE_INTEGER, "maximum": JSON_SAFE_INTEGER},
            {"type": "number", "minimum": -JSON_SAFE_INTEGER, "maximum": JSON_SAFE_INTEGER},
            {"type": "string", "pattern": TEXT_PATTERN},
            {"type": "array", "items": ref},
            {"type": "object", "additionalProperties": ref},
        ],
    }


def _manifest(components: dict[str, Any]) -> None:
    document = Manifest.model_json_schema(ref_template=f"{_REF}{_MANIFEST_PREFIX}{{model}}")
    for name, definition in document.pop("$defs", {}).items():
        components[f"{_MANIFEST_PREFIX}{name}"] = definition
    components[f"{_MANIFEST_PREFIX}JsonValue"] = _json_value()
    document["description"] = (
        "The configuration manifest (README, 'Manifests'): unknown keys are refused."
    )
    components[_MANIFEST_PREFIX] = document
    _mcp_rules(document, components)
    target = components.get(f"{_MANIFEST_PREFIX}Target")
    if target is not None:
        _target_rules(target)
    runner = components.get(f"{_MANIFEST_PREFIX}Runner")
    if runner is not None:
        _runner_rules(runner)
    create = components.get("CandidateCreate")
    if create is not None:
        _create_rules(create)


# A Python entrypoint is `module:attribute`, without control characters.
_ENTRYPOINT = f"^[^{CONTROL_CLASS}]*:[^{CONTROL_CLASS}]*$"


def _target_rules(target: dict[str, Any]) -> None:
    """Each target kind's required field: a python target's entrypoint, an http target's url,
    an mcp target's runner."""
    target["allOf"] = [
        {
            "if": {"properties": {"kind": {"const": "python"}}, "required": ["kind"]},
            "then": {
                "required": ["entrypoint"],
                "properties": {"entrypoint": {"type": "string", "pattern": _ENTRYPOINT}},
            },
        },
        {
            "if": {"properties": {"kind": {"const": "http"}}, "required": ["kind"]},
            "then": {
                "required": ["url"],
                "properties": {"url": {"type": "string", "minLength": 1}},
            },
        },
        {
            "if": {"properties": {"kind": {"const": "mcp"}}, "required": ["kind"]},
            "then": {"required": ["runner"], "properties": {"runner": {"type": "object"}}},
        },
    ]


def _runner_rules(runner: dict[str, Any]) -> None:
    """Each runner kind's required field: a command, a url, or an entrypoint."""
    runner["allOf"] = [
        {
            "if": {"properties": {"kind": {"enum": list(kinds)}}, "required": ["kind"]},
            "then": {"required": [field], "properties": {field: rule}},
        }
        for kinds, field, rule in (
            (("command",), "command", {"type": "array", "minItems": 1}),
            (("http",), "url", {"type": "string", "minLength": 1}),
            (
                ("python", "langgraph", "openai-agents"),
                "entrypoint",
                {"type": "string", "pattern": _ENTRYPOINT},
            ),
        )
    ]


def _create_rules(create: dict[str, Any]) -> None:
    """A submission's manifest is the manifest schema; its system and version come from the
    body or from the manifest."""
    create["properties"]["manifest"] = {
        "$ref": f"{_REF}{_MANIFEST_PREFIX}",
        "description": "the configuration manifest",
    }
    create["allOf"] = [
        {
            "anyOf": [
                {"required": [name], "properties": {name: {"type": "string"}}},
                {
                    "properties": {
                        "manifest": {
                            "required": [name],
                            "properties": {name: {"type": "string"}},
                        }
                    }
                },
            ]
        }
        for name in ("system", "version")
    ]


def _mcp_rules(document: dict[str, Any], components: dict[str, Any]) -> None:
    """An `mcp` target needs a runner and a tool contract in `tools`; `invariants` belong to mcp
    targets only (the core's rules, stated so that a client following the schema is accepted)."""
    contract = Contract.model_json_schema(ref_template=f"{_REF}{_MANIFEST_PREFIX}{{model}}")
    for name, definition in contract.pop("$defs", {}).items():
        components.setdefault(f"{_MANIFEST_PREFIX}{name}", definition)
    components[f"{_MANIFEST_PREFIX}Contract"] = contract
    is_mcp = {
        "required": ["target"],
        "properties": {"target": {"required": ["kind"], "properties": {"kind": {"const": "mcp"}}}},
    }
    document["allOf"] = [
        {
            "if": is_mcp,
            "then": {
                "properties": {
                    "tools": {"$ref": f"{_REF}{_MANIFEST_PREFIX}Contract"},
                    "target": {"required": ["runner"]},
                }
            },
            "else": {
                "properties": {
                    "invariants": {"type": "object", "maxProperties": 0},
                    "target": {"not": {"required": ["runner"]}},
                }
            },
        }
    ]


def _plan(components: dict[str, Any], settings: Settings) -> None:
    plan = components.get("PlanCreate")
    if plan is None:
        return
    faults = len(catalogue_named("full").faults)
    most = min(settings.max_trials_per_fault, settings.max_trials_per_assay // faults)
    trials = plan["properties"]["trials"]
    for option in trials.get("anyOf", [trials]):
        if option.get("type") == "integer":
            option["maximum"] = most
    trials["description"] = (
        f"{trials.get('description', '')}; at most {most} here (ASSAYGATE_MAX_TRIALS_PER_FAULT "
        "and ASSAYGATE_MAX_TRIALS_PER_ASSAY)"
    ).lstrip("; ")
    none = {"anyOf": [{"type": "array", "maxItems": 0}, {"type": "null"}]}
    # Paper mode draws its modes itself: none may be named.
    plan["if"] = {"properties": {"catalogue": {"const": "paper"}}, "required": ["catalogue"]}
    plan["then"] = {"properties": {"modes": none}}
    # Families and modes together must select at least one fault: some named mode belongs to a
    # named family (or one of the two lists is left out or empty).
    by_family: dict[str, set[str]] = {}
    for fault in catalogue_named("full").faults:
        by_family.setdefault(fault.domain.value, set()).update({fault.id, fault.mode})
    plan["anyOf"] = [
        {"not": {"required": ["families"]}},
        {"properties": {"families": none}},
        {"not": {"required": ["modes"]}},
        {"properties": {"modes": none}},
        *(
            {
                "required": ["families", "modes"],
                "properties": {
                    "families": {"type": "array", "contains": {"const": family}},
                    "modes": {"type": "array", "contains": {"enum": sorted(modes)}},
                },
            }
            for family, modes in sorted(by_family.items())
        ),
    ]


# ----------------------------------------------------------------------- the text rule


def _text_rule(schema: dict[str, Any], components: dict[str, Any]) -> None:
    reachable: set[str] = set()
    for method, path, operation in _operations(schema):
        for parameter in operation.get("parameters", []):
            if parameter.get("in") not in ("path", "query"):
                continue
            pattern = PARAMETER_PATTERN
            if (method, path, parameter["name"]) == (
                "PUT",
                "/v1/systems/{system}/triggers",
                "system",
            ):
                pattern = SYSTEM_NAME_PATTERN  # this route creates the system if it is new
            _strings(parameter.get("schema", {}), pattern, components, reachable, keys=False)
        for media in operation.get("requestBody", {}).get("content", {}).values():
            _strings(media.get("schema", {}), TEXT_PATTERN, components, reachable, keys=True)


def _strings(
    node: Any, pattern: str, components: dict[str, Any], seen: set[str], *, keys: bool
) -> None:
    """Give every unconstrained string under `node` the pattern, and (in bodies) every map's
    keys the text rule, following references into the components once each."""
    if isinstance(node, list):
        for item in node:
            _strings(item, pattern, components, seen, keys=keys)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        name = ref[len(_REF) :]
        if name not in seen and name in components:
            seen.add(name)
            _strings(components[name], pattern, components, seen, keys=keys)
    if node.get("type") == "string" and not {"pattern", "enum", "const", "format"} & set(node):
        node["pattern"] = pattern
    if (
        keys
        and node.get("type") == "object"
        and node.get("additionalProperties") not in (None, False)
    ):
        node.setdefault("propertyNames", {"pattern": TEXT_PATTERN})
    for key in ("properties", "patternProperties", "$defs"):
        for child in (node.get(key) or {}).values():
            _strings(child, pattern, components, seen, keys=keys)
    for key in ("items", "additionalProperties", "if", "then", "else", "not"):
        _strings(node.get(key), pattern, components, seen, keys=keys)
    for key in ("anyOf", "allOf", "oneOf", "prefixItems"):
        _strings(node.get(key), pattern, components, seen, keys=keys)
