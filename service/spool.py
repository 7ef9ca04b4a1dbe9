"""The embedded broker: kombu's filesystem transport, with a put a reader can never see half-done.

kombu's own put creates the message file and only then writes it, while its get moves any file
whose name matches out of the queue folder and reads it. A worker polling every 50 ms moves
the file between the two: it reads an empty payload, its consumer dies on the JSON error, and
the moved file is deleted, so the task is lost. Here the payload is written under a name no
reader matches and renamed into place, which is atomic within one folder.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    # kombu's own stubs disagree on this name (virtual says message, filesystem payload).
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        # Readers take only names `<stamp>_<id>.<queue>.msg`: a leading dot never parts that way.
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4()}.part")
        final = os.path.join(self.data_folder_out, name)
        try:
            with open(partial, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
                file.flush()
                os.fsync(file.fileno())
            os.rename(partial, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
