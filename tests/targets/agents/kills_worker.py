"""A user's agent that takes down the process it runs in, every time: the worker's pool child
dies mid-shard. However often the shard is sent again, it never finishes; the service must give
up on it after its attempts and say why, not run it forever."""

from __future__ import annotations

import os
import signal

from service.core.sandbox import Task, Tools


def run(task: Task, tools: Tools) -> None:
    del task, tools
    os.kill(os.getpid(), signal.SIGKILL)
