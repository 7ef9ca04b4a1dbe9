"""Server time per dashboard page with 50 systems and 1,000 candidates. Prints; never asserts.

Seeds the database directly through the db layer (the rows a worker leaves behind: candidates,
assays with their reports, fault results, events) on a schema the real migrations built, then
renders each page in-process through the whole ASGI app and reports p50/p99 wall time per page.
PostgreSQL when the test server answers (ASSAYGATE_TEST_PG), else a temporary SQLite file.

    .venv/bin/python bench/dashboard_render.py [--systems 50] [--candidates 1000] [--repeat 40]
        [--sqlite]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # in-process: server time, no socket
from sqlmodel import Session

from service.asgi import create_app
from service.db import migrate
from service.db.apikey import create_key
from service.db.models import KeyRole
from service.db.session import make_engine
from service.keys import KeyRing
from service.settings import Settings
from tests.web.seed import report_of, seed_candidate

EXAMPLES = ("baseline", "typed", "typed-repair", "refuse-all")


@contextlib.contextmanager
def database(use_sqlite: bool, root: Path) -> Iterator[tuple[str, str]]:
    if not use_sqlite:
        try:
            from tests.support.service import postgres_database

            with postgres_database("bench") as url:
                yield url, "PostgreSQL"
                return
        except Exception as exc:  # no server: fall back, and say so
            print(f"PostgreSQL unavailable ({exc.__class__.__name__}); using SQLite")
    yield f"sqlite:///{root / 'bench.sqlite3'}", "SQLite"


def seed(settings: Settings, systems: int, candidates: int) -> tuple[list[str], list[str]]:
    engine = make_engine(settings)
    assert settings.keys_dir is not None
    signer = KeyRing(settings.keys_dir).load_or_create()
    names = [f"system-{i:03d}" for i in range(systems)]
    ids: list[str] = []
    start = datetime.now(UTC) - timedelta(days=30)
    for name in EXAMPLES:
        report_of(name)  # computed once, outside the timing of anything
    with Session(engine, expire_on_commit=False) as session:
        for n in range(candidates):
            system = names[n % systems]
            recorded = seed_candidate(
                session,
                system=system,
                version=f"1.{n // systems}.0",
                example_name=EXAMPLES[n % len(EXAMPLES)],
                created_at=start + timedelta(minutes=n),
                source_revision=f"{n:07x}",
                signer=signer,
            )
            ids.append(str(recorded.candidate.id))
            if n % 100 == 99:
                session.commit()
        session.commit()
    engine.dispose()
    return names, ids


def sign_in(client: TestClient, settings: Settings) -> None:
    """Every page needs a signed-in key of the seeded tenant: make one and sign in with it."""
    engine = make_engine(settings)
    with Session(engine) as session:
        created = create_key(
            session, tenant="acme", roles=[KeyRole.REVIEWER], name="bench", person="bench reviewer"
        )
        session.commit()
        secret = created.secret
    engine.dispose()
    form = client.get("/signin").text
    csrf = form.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    answer = client.post(
        "/signin", data={"credential": secret, "csrf": csrf, "next": "/"}, follow_redirects=False
    )
    assert answer.status_code == 303, answer.text


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", type=int, default=50)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=40)
    parser.add_argument("--sqlite", action="store_true", help="skip PostgreSQL")
    args = parser.parse_args()
    warnings.simplefilter("ignore")

    with tempfile.TemporaryDirectory() as tmp, database(args.sqlite, Path(tmp)) as (url, kind):
        settings = Settings(data_dir=Path(tmp), database_url=url, log_level="WARNING")
        migrate.upgrade(settings)
        began = time.perf_counter()
        names, ids = seed(settings, args.systems, args.candidates)
        print(
            f"{kind}: seeded {args.systems} systems, {args.candidates} candidates "
            f"in {time.perf_counter() - began:.1f} s"
        )
        app = create_app(settings)
        with TestClient(app) as client:
            sign_in(client, settings)
            deep = client.get("/candidates").text
            cursor = deep.split("?cursor=")[1].split('"')[0] if "?cursor=" in deep else ""
            pages = {
                "systems (50 per page)": "/",
                "candidates, newest page": "/candidates",
                "candidates, second page": f"/candidates?cursor={cursor}",
                "system (20 candidates)": f"/systems/{names[0]}",
                "candidate, blocked baseline": f"/candidates/{ids[0]}",
                "candidate, typed": f"/candidates/{ids[1]}",
                "dossier (verified per request)": f"/candidates/{ids[0]}/dossier",
                "holds queue (open)": "/holds",
                "event log": "/events",
                "event log, filtered": "/events?kind=assay.decided",
            }
            print(f"{'page':32} {'p50 ms':>8} {'p99 ms':>8} {'KiB':>7}")
            for label, url_path in pages.items():
                response = client.get(url_path)
                assert response.status_code == 200, (url_path, response.status_code)
                times: list[float] = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    client.get(url_path)
                    times.append((time.perf_counter() - t0) * 1000)
                print(
                    f"{label:32} {statistics.median(times):8.1f} {percentile(times, 0.99):8.1f} "
                    f"{len(response.content) / 1024:7.1f}"
                )


if __name__ == "__main__":
    main()
