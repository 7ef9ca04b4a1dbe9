"""The tenant's webhooks (admin only): add (the signing secret is shown once), list, remove, and
each one's delivery log with every attempt. What is sent and how it is signed:
docs/operations.md, "Webhooks"."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from service.api.errors import ERROR_RESPONSES
from service.app import webhooks
from service.app.notify import HookEvent
from service.app.records import as_utc, as_utc_or_none
from service.http.deps import PrincipalDep, SessionDep, SettingsDep

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=8,
        max_length=2000,
        pattern=r"^https?://[^\s/?#]+",
        description="http(s), within the deployment's egress policy",
    )
    format: Literal["json", "slack"] = Field(
        default="json", description="`slack`: a Slack incoming-webhook body (`text`, `blocks`)"
    )
    events: list[HookEvent] | None = Field(
        default=None, min_length=1, max_length=16, description="default: every event"
    )
    system: str | None = Field(
        default=None, min_length=1, max_length=200, description="default: every system"
    )


class WebhookPublic(BaseModel):
    id: uuid.UUID
    url: str
    format: str
    events: list[str]
    system: str | None
    created_at: datetime


class WebhookCreated(WebhookPublic):
    secret: str = Field(description="the signing secret; shown this once")


class WebhookList(BaseModel):
    items: list[WebhookPublic]


class AttemptPublic(BaseModel):
    number: int
    at: datetime
    outcome: str
    status_code: int | None
    error: str | None
    duration_ms: int


class DeliveryPublic(BaseModel):
    id: uuid.UUID
    event: str
    candidate_id: uuid.UUID | None
    status: str
    attempts: list[AttemptPublic]
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None


class DeliveryList(BaseModel):
    items: list[DeliveryPublic]


def _public(session: SessionDep, hook: webhooks.Webhook) -> WebhookPublic:
    return WebhookPublic(
        id=hook.id,
        url=hook.url,
        format=hook.format,
        events=list(hook.events),
        system=webhooks.system_name(session, hook),
        created_at=as_utc(hook.created_at),
    )


@router.get("", response_model=WebhookList, responses={503: ERROR_RESPONSES[503]})
def list_webhooks(session: SessionDep, principal: PrincipalDep) -> WebhookList:
    """The tenant's webhooks; never a secret."""
    return WebhookList(items=[_public(session, h) for h in webhooks.of_tenant(session, principal)])


@router.post(
    "",
    status_code=201,
    response_model=WebhookCreated,
    responses={k: ERROR_RESPONSES[k] for k in (404, 422, 503)},
)
def create_webhook(
    body: WebhookCreate, session: SessionDep, principal: PrincipalDep, settings: SettingsDep
) -> WebhookCreated:
    """Subscribe `url` to the tenant's events; the answer holds the signing secret, once."""
    created = webhooks.create(
        session,
        principal,
        settings,
        webhooks.Subscribe(
            url=body.url,
            format=body.format,
            events=[e.value for e in body.events] if body.events is not None else None,
            system=body.system,
        ),
    )
    return WebhookCreated(**_public(session, created.webhook).model_dump(), secret=created.secret)


@router.delete(
    "/{webhook_id}",
    status_code=204,
    response_class=Response,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def delete_webhook(webhook_id: uuid.UUID, session: SessionDep, principal: PrincipalDep) -> Response:
    """Stop a webhook: nothing more is sent; its delivery log stays readable."""
    webhooks.remove(session, principal, webhook_id)
    return Response(status_code=204)


@router.get(
    "/{webhook_id}/deliveries",
    response_model=DeliveryList,
    responses={k: ERROR_RESPONSES[k] for k in (404, 503)},
)
def list_deliveries(
    webhook_id: uuid.UUID,
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> DeliveryList:
    """The webhook's deliveries, newest first, each with every attempt (status, code, error)."""
    found = webhooks.deliveries(session, principal, webhook_id, limit)
    return DeliveryList(
        items=[
            DeliveryPublic(
                id=log.delivery.id,
                event=log.delivery.event,
                candidate_id=log.delivery.candidate_id,
                status=log.delivery.status,
                attempts=[
                    AttemptPublic(
                        number=a.number,
                        at=as_utc(a.at),
                        outcome=a.outcome,
                        status_code=a.status_code,
                        error=a.error,
                        duration_ms=a.duration_ms,
                    )
                    for a in log.attempts
                ],
                next_attempt_at=as_utc(log.delivery.next_attempt_at)
                if log.delivery.status == webhooks.DeliveryStatus.PENDING.value
                else None,
                created_at=as_utc(log.delivery.created_at),
                delivered_at=as_utc_or_none(log.delivery.delivered_at),
            )
            for log in found
        ]
    )
