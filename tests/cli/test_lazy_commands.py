"""A command line that names a command builds only that command's parser: the same parser, help
and errors as the whole command's, without importing what the other commands need."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from service.cli import COMMANDS, build_parser, main
from tests.support.service import ROOT


def commands_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_the_table_names_every_command_with_the_module_that_registers_it_in_help_order() -> None:
    whole = commands_of(build_parser())
    assert list(whole) == list(COMMANDS)
    for name, module in COMMANDS.items():
        parser = argparse.ArgumentParser()
        importlib.import_module(f"service.cli.{module}").register(parser.add_subparsers())
        assert name in commands_of(parser), (name, module)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_built_alone_has_the_help_of_the_whole_parsers_command(command: str) -> None:
    alone = commands_of(build_parser(command))[command]
    assert alone.format_help() == commands_of(build_parser())[command].format_help()


def test_a_word_that_names_no_command_is_refused_naming_the_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["gaet"]) == 2
    said = capsys.readouterr().err
    assert "invalid choice: 'gaet'" in said and "gate" in said and "assay" in said


def test_gate_never_imports_the_database_layer_or_the_settings_of_the_service() -> None:
    probe = (
        "import sys\n"
        "from service.cli import main\n"
        "try:\n"
        "    main(['gate', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('sqlmodel', 'service.db.models', 'service.cli.keys')"
        " if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout
