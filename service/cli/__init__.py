"""The `assaygate` command. Every core error becomes one line and exit code 2 here, once."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import textwrap
from collections.abc import Sequence

from service.app.errors import AppError
from service.cli.errors import CI_COMMANDS, EXIT_ERROR, UsageError, exit_codes_text
from service.core.errors import AssaygateError

# The command-line spelling of a use case's field, where the two differ.
_FLAGS = {
    "kind": "--person/--service-account",
    "person": "--person",
    "tenant": "--tenant",
    "roles": "--role",
    "key_id": "key id",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


# The module that registers each command, in the order `--help` lists them. A command line that
# names a command imports only that module (a CI job's `gate` never loads the database layer or
# the engine's targets); `--help`, `--version` and a word that names no command build them all.
COMMANDS: dict[str, str] = {
    "assay": "engine",
    "catalogue": "engine",
    "mcp-proxy": "engine",
    "replay": "engine",
    "verify": "evidence",
    "plan": "evidence",
    "serve": "serve",
    "demo": "demo",
    "submit": "ci",
    "gate": "ci",
    "pack": "artifacts",
    "keys": "keys",
    "secrets": "secrets",
    "webhooks": "webhooks",
    "tenants": "tenants",
    "policy": "policy",
    "db": "database",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or (`command`) only the one named, whose
    parser, help and errors are the same as in the whole one."""
    import importlib

    parser = _Parser(
        prog="assaygate",
        description="Typed failure injection as release evidence.",
        epilog="Each command's --help ends with what its exit codes mean.",
    )
    parser.add_argument("--version", action="version", version=f"assaygate {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    names = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in names:
        importlib.import_module(f"service.cli.{name}").register(sub)
    _with_exit_codes(parser)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("assaygate")
    except PackageNotFoundError:  # a checkout on PYTHONPATH, never installed
        return "unknown (not installed)"


def _with_exit_codes(parser: argparse.ArgumentParser, path: str = "") -> None:
    """End every command's `--help` with its exit codes, from the one table in errors.py."""
    if path:
        parser.epilog = "\n\n".join(filter(None, (parser.epilog, exit_codes_text(path))))
        # Keep the table's line breaks; the raw formatter no longer wraps the description, so
        # wrap it here as argparse would.
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        if parser.description:
            parser.description = textwrap.fill(" ".join(parser.description.split()), width=78)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                _with_exit_codes(child, f"{path} {name}".strip())


def main(argv: Sequence[str] | None = None) -> int:
    from service.compile import state

    if state() == "stale":
        # Only a source checkout can get here: an edited hot module with an older build beside it.
        print(
            "assaygate: warning: the compiled core is older than its source; run `make venv`",
            file=sys.stderr,
        )
    try:
        words = list(sys.argv[1:] if argv is None else argv)
        args = build_parser(words[0] if words else None).parse_args(words)
        code: int = args.func(args)
        # Flush here, so a reader that left early (`| head`) is handled below, not at exit.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader of our output went away (`assaygate replay … | head`): stop quietly, as
        # other command-line tools do, and keep Python from complaining again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except UsageError as exc:
        print(f"assaygate: error: {exc}", file=sys.stderr)
        return _error_code(argv)
    except AssaygateError as exc:
        print(f"assaygate: error: {exc}", file=sys.stderr)
        return _error_code(argv)
    except AppError as exc:
        where = f"{_FLAGS.get(exc.field, exc.field)}: " if exc.field else ""
        print(f"assaygate: error: {where}{exc.message}", file=sys.stderr)
        return _error_code(argv)
    except ValueError as exc:
        # Imported here: the settings module loads the key ring and the core's signing, which a
        # client command (`gate`, `submit`) never needs.
        from service.settings import SettingsInvalid

        if not isinstance(exc, SettingsInvalid):
            raise
        print(f"assaygate: error: {exc}", file=sys.stderr)
        return _error_code(argv)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = _database_error(exc)
        if message is None:
            raise
        print(f"assaygate: error: {message}", file=sys.stderr)
        return _error_code(argv)


def _database_error(exc: Exception) -> str | None:
    """A database that cannot be opened or used, as one line (the driver's first line), not the
    30-line traceback of SQLAlchemy; None for any other error, which stays a traceback (a bug)."""
    from alembic.util.exc import CommandError
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    if isinstance(exc, CommandError):
        return f"migrations: {exc}"
    if not isinstance(exc, SQLAlchemyError):
        return None
    cause = exc.orig if isinstance(exc, DBAPIError) else exc
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return (
        f"database: {first} (is this the service's folder? pass --data-dir, or set "
        "ASSAYGATE_DATA_DIR or ASSAYGATE_DATABASE_URL)"
    )


def _error_code(argv: Sequence[str] | None) -> int:
    """2 for bad input; but `assay`, `submit` and `gate` exit 2 for `hold`: their errors are 3."""
    words = list(sys.argv[1:] if argv is None else argv)
    return EXIT_ERROR if words and words[0] in CI_COMMANDS else 2
