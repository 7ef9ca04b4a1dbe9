"""The shapes of the fields that say where a target is: URLs, Python entrypoints and commands.

Checked at submission, so that a manifest a worker cannot use is refused naming its field instead
of failing later in a worker. Only the shape: whether a URL's host is allowed is the egress
policy's question, and whether an entrypoint's module exists can only be answered where the
tenant's code lives (its own workers), when the runner loads it.
"""

from __future__ import annotations

import keyword
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

URL_MAX = 2000
ENTRYPOINT_MAX = 300
COMMAND_MAX_ARGS = 256
COMMAND_ARG_MAX = 4096
BUILD_MAX = 200
# The response header an http agent (target or runner) names its build in, on every reply.
BUILD_HEADER = "Assaygate-Build"
# A build as an endpoint names itself: visible ASCII, inner spaces allowed (an MCP server's
# `name@version`, an `Assaygate-Build` header's value).
_BUILD = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")

_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$|^\[[0-9A-Fa-f:.]+\]$")


def _invalid(kind: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(kind, message)


def check_url(value: str) -> str:
    """An absolute http or https URL with a host, no user info and a valid port."""
    if len(value) > URL_MAX:
        raise _invalid("url_invalid", f"a URL of at most {URL_MAX} characters")
    if any(ch.isspace() for ch in value):
        raise _invalid("url_invalid", "a URL holds no spaces")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise _invalid("url_invalid", "not a URL (http://host[:port]/path)") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise _invalid("url_invalid", "an http:// or https:// URL")
    if "@" in parts.netloc:
        raise _invalid("url_invalid", "a URL without user info (user:password@)")
    host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    if not host or not _HOST.match(host):
        raise _invalid("url_invalid", "a URL with a host name or address")
    if port == 0 or parts.netloc.endswith(":"):
        raise _invalid("url_invalid", "a URL with a port from 1 to 65535")
    return value


def _dotted(path: str) -> bool:
    return all(p.isidentifier() and not keyword.iskeyword(p) for p in path.split("."))


def check_entrypoint(value: str) -> str:
    """`module.path:attribute.path`, each part a Python identifier."""
    module, sep, attr = value.partition(":")
    if len(value) > ENTRYPOINT_MAX or not (sep and _dotted(module) and _dotted(attr)):
        raise _invalid(
            "entrypoint_invalid",
            "'module:attribute', each a dotted path of Python identifiers "
            f"(at most {ENTRYPOINT_MAX} characters)",
        )
    return value


def check_command(value: tuple[str, ...]) -> tuple[str, ...]:
    """A program and its arguments: at least the program, each a non-empty string without NUL."""
    if not value:
        raise _invalid("command_invalid", "a command names at least its program")
    if len(value) > COMMAND_MAX_ARGS:
        raise _invalid("command_invalid", f"a command of at most {COMMAND_MAX_ARGS} arguments")
    for arg in value:
        if not arg or "\x00" in arg or len(arg) > COMMAND_ARG_MAX:
            raise _invalid(
                "command_invalid",
                f"each argument a non-empty string of at most {COMMAND_ARG_MAX} characters, "
                "without NUL",
            )
    return value


HttpUrl = Annotated[str, Field(max_length=URL_MAX), AfterValidator(check_url)]
Entrypoint = Annotated[str, Field(max_length=ENTRYPOINT_MAX), AfterValidator(check_entrypoint)]
Command = Annotated[tuple[str, ...], AfterValidator(check_command)]


def check_build(value: str) -> str:
    if len(value) > BUILD_MAX or not _BUILD.match(value):
        raise _invalid(
            "build_invalid",
            f"a build of 1 to {BUILD_MAX} printable ASCII characters, without leading or "
            "trailing spaces (an http endpoint's Assaygate-Build header, an MCP server's "
            "name@version)",
        )
    return value


# The build a candidate declares behind a remote endpoint (docs/targets.md, "Builds"): compared
# with what the endpoint reports in every trial.
Build = Annotated[str, AfterValidator(check_build)]


# A server's per-slot name: the digits that end its name after a `-` or `_` (`boxoffice-desk-3`).
_SLOT_NAME = re.compile(r"(?<=[-_])[0-9]+$")
#: What a per-slot name's number is recorded as (the `{slot}` of a slot's URLs).
SLOT_NUMBER = "{slot}"


def slot_build(build: str) -> str:
    """A server's build in a world that offers slots: its `name@version` with the number that
    ends the name after a `-` or `_` written `{slot}` (`boxoffice-desk-3@1.0.0` is
    `boxoffice-desk-{slot}@1.0.0`). The slots are copies of one world, and a copy's server may
    name the copy it serves; that number says which copy answered, not which code. The version
    and the rest of the name are the build, compared as written, so two versions (or two names)
    across the slots are still two builds. The name ends at the last `@` after its first
    character (a scoped `@team/desk-3@1.0` has the name `@team/desk-3`); a build without one
    is all name."""
    at = build.rfind("@")
    name, version = (build[:at], build[at:]) if at > 0 else (build, "")
    return _SLOT_NAME.sub(SLOT_NUMBER, name) + version


def reported_build(text: str | None) -> str | None:
    """What an endpoint reported, as the gate records it: stripped and cut to BUILD_MAX
    characters; nothing (None or blank) is None."""
    if text is None:
        return None
    text = text.strip()[:BUILD_MAX]
    return text or None
