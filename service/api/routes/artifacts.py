"""Code artifacts: `POST /v1/artifacts` stores the bytes of a packed folder (streamed, capped by
`ASSAYGATE_ARTIFACT_MAX_BYTES`) under the SHA-256 the service computes; `GET
/v1/artifacts/{digest}` hands the tenant's bytes back. Per tenant: another tenant's digest is
404. The rules are `service.app.artifacts`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from service.api.errors import ERROR_RESPONSES
from service.api.schemas import ArtifactPublic
from service.app import artifacts
from service.core.system.artifact import DIGEST_PATTERN
from service.http.deps import EngineDep, PrincipalDep, SessionDep, SettingsDep
from service.http.errors import ApiError, BodyTooLarge
from service.http.middleware import STREAMED_TYPES
from service.packing import UnpackLimits

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])

ARTIFACTS_PATH = "/v1/artifacts"
ARTIFACT_TYPE = "application/gzip"

Digest = Annotated[
    str,
    Path(
        pattern=DIGEST_PATTERN,
        description="`sha256:` and 64 lowercase hex digits, as the upload answered",
    ),
]


class UnsupportedType(ApiError):
    status_code = 415
    code = "unsupported_media_type"


@router.post(
    "",
    status_code=201,
    response_model=ArtifactPublic,
    responses={
        200: {"model": ArtifactPublic, "description": "the same bytes were already stored"},
        **{k: ERROR_RESPONSES[k] for k in (409, 413, 415, 422, 503)},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                t: {"schema": {"type": "string", "format": "binary"}} for t in STREAMED_TYPES
            },
        }
    },
)
async def upload_artifact(
    request: Request,
    engine: EngineDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    digest: Annotated[
        str | None,
        Query(
            pattern=DIGEST_PATTERN,
            description="the digest the client computed (`sha256:…`); bytes that hash to "
            "anything else are refused (409 `digest_mismatch`, naming `digest`)",
        ),
    ] = None,
) -> Response:
    """Store a packed folder (`tar.gz`, as `assaygate pack` makes one) for the tenant. The
    answer's `digest` is the SHA-256 the service computed over the bytes it received: name it
    as a candidate's `code`. Uploading the same bytes again stores nothing and answers 200.
    Bytes a worker would not unpack (not a `tar.gz`; an absolute path, `..`, a link leaving
    the folder, a hard link, device or fifo; past the entry or unpacked-size caps) are 422
    naming `body` and the rule, and nothing is stored."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind not in STREAMED_TYPES:
        raise UnsupportedType(
            f"send the packed bytes as {' or '.join(sorted(STREAMED_TYPES))}, not {kind or 'none'}",
            field="Content-Type",
        )
    cap = settings.artifact_max_bytes
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise BodyTooLarge(
                f"an artifact holds at most {cap} bytes (ASSAYGATE_ARTIFACT_MAX_BYTES)"
            )
        chunks.append(chunk)
    data = b"".join(chunks)

    def store() -> artifacts.Uploaded:
        limits = UnpackLimits(settings.artifact_unpacked_max_bytes, settings.artifact_max_entries)
        return artifacts.store(engine, principal, data, digest, limits)

    stored = await run_in_threadpool(store)
    public = ArtifactPublic(digest=stored.digest, size=stored.size, created=stored.created)
    return JSONResponse(
        public.model_dump(mode="json"),
        status_code=201 if stored.created else 200,
        headers={"Location": f"{ARTIFACTS_PATH}/{stored.digest}"},
    )


@router.get(
    "/{digest}",
    response_class=Response,
    responses={
        200: {"content": {ARTIFACT_TYPE: {"schema": {"type": "string", "format": "binary"}}}},
        **{k: ERROR_RESPONSES[k] for k in (404, 422, 503)},
    },
)
def get_artifact(digest: Digest, session: SessionDep, principal: PrincipalDep) -> Response:
    """The tenant's artifact, byte for byte as stored (another tenant's is 404)."""
    data = artifacts.download(session, principal, digest)
    return Response(data, media_type=ARTIFACT_TYPE, headers={"ETag": f'"{digest}"'})
