"""Builds: what answered at each remote endpoint, beside the build the candidate declared.

A remote endpoint (an `http` target's agent, an `mcp` target's http runner or server over HTTP)
reports its build with every reply: the `Assaygate-Build` header, an MCP server's `serverInfo`
as `name@version`. The tallies count, per (endpoint, build), the runs of every arm in which it
answered; here they meet the declaration (`manifest.build_endpoints`). A run that answered
without a build counts as the build `None`. The gate holds (`build_mismatch`) on a report that
differs from the declaration, nothing reported where a build was declared, or, with nothing
declared, more than one build: evidence about one build is not evidence about another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.core.system.artifact import ArtifactSubject, Assurance, build_digest

# How far a build is vouched for: the endpoint reported the declared build in every run that
# reached it (or, declared nothing and reported one build throughout), or it was only declared.
REPORTED = "reported"
DECLARED = "declared"


@dataclass(frozen=True)
class EndpointBuilds:
    """One endpoint: its declared build (None: none), and each build it reported (None: a reply
    without one) with the runs it was reported in."""

    endpoint: str
    declared: str | None
    reported: tuple[tuple[str | None, int], ...] = ()

    @property
    def runs(self) -> int:
        return sum(n for _, n in self.reported)

    @property
    def assurance(self) -> str | None:
        builds = {b for b, _ in self.reported}
        if self.declared is not None:
            return REPORTED if builds == {self.declared} else DECLARED
        return REPORTED if len(builds) == 1 and None not in builds else None

    def mismatch(self) -> str | None:
        """What is wrong, said for a reason's message (None: nothing)."""
        runs = self.runs
        if self.declared is None:
            builds = sorted(b for b, _ in self.reported if b is not None)
            if len(builds) < 2:
                return None
            listed = ", ".join(f"{b!r} in {n}" for b, n in self.reported if b is not None)
            return (
                f"{self.endpoint} reported {len(builds)} different builds ({listed} of {runs} "
                "trials): the evidence is not about one build; declare the build that ships"
            )
        wrong = [(b, n) for b, n in self.reported if b != self.declared]
        if not wrong:
            return None
        said = "; ".join(
            f"reported nothing in {n} of {runs} trials"
            if b is None
            else f"reported {b!r} in {n} of {runs} trials"
            for b, n in wrong
        )
        return (
            f"{self.endpoint} was declared as build {self.declared!r} but {said}: what answered "
            "is not (or could not be shown to be) the build the candidate declared"
        )

    def view(self) -> dict[str, Any]:
        return {
            "declared": self.declared,
            "reported": _reported(self.reported),
            "assurance": self.assurance,
        }


def _reported(reported: tuple[tuple[str | None, int], ...]) -> list[dict[str, Any]]:
    return [{"build": b, "trials": n} for b, n in reported]


def _order(kv: tuple[tuple[str, str | None], int]) -> tuple[str, bool, str]:
    (endpoint, build), _ = kv
    return (endpoint, build is not None, build or "")


def endpoint_builds(
    declared: Mapping[str, str | None], *counts: Mapping[tuple[str, str | None], int]
) -> tuple[EndpointBuilds, ...]:
    """Every endpoint that declared or reported a build, in endpoint order; `counts` (one
    fault's, or every fault's) are summed."""
    total: dict[tuple[str, str | None], int] = {}
    for c in counts:
        for key, n in c.items():
            total[key] = total.get(key, 0) + n
    seen: dict[str, list[tuple[str | None, int]]] = {}
    for (endpoint, build), n in sorted(total.items(), key=_order):
        seen.setdefault(endpoint, []).append((build, n))
    names = sorted({e for e, b in declared.items() if b is not None} | set(seen))
    return tuple(EndpointBuilds(e, declared.get(e), tuple(seen.get(e, ()))) for e in names)


def fault_view(counts: Mapping[tuple[str, str | None], int]) -> dict[str, list[dict[str, Any]]]:
    """A fault's builds as its report entry carries them: per endpoint, each build and its runs."""
    return {e.endpoint: _reported(e.reported) for e in endpoint_builds({}, counts)}


def from_fault_view(view: Mapping[str, Any]) -> dict[tuple[str, str | None], int]:
    """A fault's builds read back from its report entry."""
    out: dict[tuple[str, str | None], int] = {}
    for endpoint, rows in view.items():
        for row in rows:
            build = row.get("build")
            out[(str(endpoint), None if build is None else str(build))] = int(row["trials"])
    return out


def assay_view(builds: tuple[EndpointBuilds, ...]) -> dict[str, dict[str, Any]]:
    return {e.endpoint: e.view() for e in builds}


def from_assay_view(view: Mapping[str, Any]) -> tuple[EndpointBuilds, ...]:
    out: list[EndpointBuilds] = []
    for endpoint, entry in sorted(view.items()):
        declared = entry.get("declared")
        reported = tuple(
            (None if r.get("build") is None else str(r["build"]), int(r["trials"]))
            for r in entry.get("reported") or ()
        )
        out.append(
            EndpointBuilds(str(endpoint), None if declared is None else str(declared), reported)
        )
    return tuple(out)


#: The name prefix of a remote endpoint's build among a dossier's subjects (`build:<endpoint>`).
BUILD = "build"


def build_subjects(builds: tuple[EndpointBuilds, ...]) -> list[ArtifactSubject]:
    """The dossier's subjects for the remote builds: each build an endpoint reported in the
    trials is `reported` (its own word, read per trial); a declared build it never reported
    stays `declared`. A build written as a digest is a subject by that digest, any other by
    the SHA-256 of its text (`artifact.build_digest`)."""
    found: list[ArtifactSubject] = []
    for e in builds:
        name = f"{BUILD}:{e.endpoint}"
        reported = sorted({b for b, _ in e.reported if b is not None})
        for b in reported:
            found.append(ArtifactSubject(name, build_digest(b), Assurance.REPORTED, ref=b))
        if e.declared is not None and e.declared not in reported:
            declared = build_digest(e.declared)
            found.append(ArtifactSubject(name, declared, Assurance.DECLARED, ref=e.declared))
    return found
