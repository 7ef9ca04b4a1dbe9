"""The one check of a request's text, run before every API route and dashboard page.

Path parameters, query parameters (names and values), form fields and the JSON body (every key
and string, however deep) are held to `service.core.system.text.check_text`: a refused control
character is a 422 naming the field, before any route reads the value, any query runs or any
row is written. Path and query values are one line (no TAB, LF or CR either); body text may
hold tabs and line breaks.
"""

from __future__ import annotations

from fastapi import Request
from starlette.datastructures import UploadFile

from service.core.system.text import TextInvalid, check_text


async def check_request_text(request: Request) -> None:
    for name, value in request.path_params.items():
        check_text(value, str(name), line=True)
    for name, value in request.query_params.multi_items():
        check_text(name, "query", line=True)
        check_text(value, name, line=True)
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind == "application/json" or kind.endswith("+json"):
        try:
            # Parsed (and cached) once: the route's body validation reads the same object.
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            return  # not JSON: the route's own body validation answers 400
        try:
            check_text(body, "")
        except TextInvalid as exc:
            exc.field = exc.field or "body"
            raise
    elif kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        for name, value in form.multi_items():
            if not isinstance(value, UploadFile):
                check_text(name, "form", line=True)
                check_text(value, name)
