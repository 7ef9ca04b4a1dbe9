"""The example http agent (examples/http-agent/agent.py, every switch of it), whose
`Assaygate-Build` header names its own build for the first `--after` tasks and `--then` after
them: another build answering behind the same URL mid-assay.

    python swapped_http.py --after N --then BUILD --port 0 --controls typed
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "http-agent"))

import agent


def main() -> None:
    argv = sys.argv[1:]
    after = int(argv[argv.index("--after") + 1])
    then = argv[argv.index("--then") + 1]
    rest = [
        x
        for i, x in enumerate(argv)
        if x not in ("--after", "--then") and not (i > 0 and argv[i - 1] in ("--after", "--then"))
    ]
    tasks = [0]
    lock = threading.Lock()

    class Swapped(agent.Handler):
        def answer(self, method: bytes, path: bytes, body: bytes) -> tuple[int, dict[str, object]]:
            status, reply = super().answer(method, path, body)
            if method == b"POST":
                with lock:
                    tasks[0] += 1
                    if tasks[0] > after:
                        self.server.config.build = then
            return status, reply

    agent.Handler = Swapped  # type: ignore[misc]
    agent.main(rest)


if __name__ == "__main__":
    main()
