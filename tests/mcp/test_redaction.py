"""What an agent says about its failure reaches reports and the signed dossier; a secret it was
handed never does, however it prints it."""

from __future__ import annotations

from pathlib import Path

from service.mcp.runners import agent_said, last_line
from service.sandbox import Confinement

SECRET = "sk-live-0123456789abcdef"
CONFINED = Confinement(code_dir=Path("/nonexistent"), env={"OPENAI_API_KEY": SECRET, "M": "x"})


def test_a_command_agent_printing_its_secret_in_its_exception_has_it_blanked() -> None:
    stderr = f"Traceback ...\nRuntimeError: bad key {SECRET} for model\n".encode()
    said = last_line(stderr, CONFINED)
    assert SECRET not in said and said == "RuntimeError: bad key [redacted] for model"


def test_a_python_host_answering_its_secret_in_the_error_has_it_blanked() -> None:
    said = agent_said('{"error": "ValueError: ' + SECRET + '"}', CONFINED)
    assert SECRET not in said and said == ": ValueError: [redacted]"


def test_a_secret_cut_at_the_length_bound_is_blanked_before_the_cut() -> None:
    stderr = ("x" * 230 + SECRET).encode()
    assert SECRET[:8] not in last_line(stderr, CONFINED)
