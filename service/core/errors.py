"""Typed errors of the core. The API and the CLI translate them at their edges."""

from __future__ import annotations

from collections.abc import Iterator


class AssaygateError(Exception):
    """Root of every error the core raises on purpose."""

    code = "assaygate_error"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class ManifestInvalid(AssaygateError):
    code = "manifest_invalid"


class PlanInvalid(AssaygateError):
    code = "plan_invalid"


class FaultUnknown(PlanInvalid):
    code = "fault_unknown"


class CatalogueInvalid(AssaygateError):
    code = "catalogue_invalid"


class TargetUnsupported(AssaygateError):
    code = "target_unsupported"


class CredentialInvalid(AssaygateError):
    code = "credential_invalid"


class SecretInvalid(AssaygateError):
    """A secret's name or value breaks its rule (the message never holds the value)."""

    code = "secret_invalid"


class SecretUnreadable(AssaygateError):
    """A stored secret does not decrypt under this key for this tenant and name: the key is not
    the one it was stored under, or the row was copied to another tenant or name."""

    code = "secret_unreadable"


class ArtifactInvalid(AssaygateError):
    """An artifact's digest or contents break a rule: a malformed digest, bytes that do not hash
    to the digest they are stored under, an archive that does not unpack safely."""

    code = "artifact_invalid"


class PolicyViolation(AssaygateError):
    """A submission (its manifest's `envelope`, or its plan) sets a field looser than the
    organisation's policy allows. `field` names the submitted field, `policy` the policy's."""

    code = "policy_violation"

    def __init__(self, message: str, field: str, policy: str) -> None:
        super().__init__(message, field)
        self.policy = policy


class PolicyInvalid(AssaygateError):
    """A policy document breaks a rule of its own (an unknown key, a rule that allows nothing)."""

    code = "policy_invalid"


class EvidenceUnsealable(AssaygateError):
    """A result that cannot be stored or signed: RFC 8785 refuses it (a number that is NaN,
    infinite or beyond 2^53, a string that is not UTF-8). It fails the assay it belongs to."""

    code = "evidence_unsealable"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and everything behind it, depth first: an exception group's members in order, then
    each error's cause and context (client libraries wrap what failed; the MCP SDK in its task
    group's `ExceptionGroup`). Each error once, whatever cycles the chain holds."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        behind = [*(e.exceptions if isinstance(e, BaseExceptionGroup) else ())]
        behind += [x for x in (e.__cause__, e.__context__) if x is not None]
        todo.extend(reversed(behind))
