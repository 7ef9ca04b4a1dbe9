"""The egress policy's resolving half: check a manifest's URLs at submission and every
connection the worker opens for them, redirects included (docs/operations.md,
"Egress policy").

`EgressPolicy.check_url(url, field)` parses and resolves a URL at submission; `resolve(host,
port)` resolves at connection time, checks every address and returns the one to connect to (the
OS sandbox's forward proxy calls it through `Confinement.egress`). The clients connect to that
address, not to a second resolution of the name, so a name that re-binds between the check and
the connection reaches nothing new: `EgressTransport` / `AsyncEgressTransport` (httpx, httpx2 for
the MCP SDK) pin each request, every redirect hop included, and `HTTPConnection` /
`HTTPSConnection` pin http.client's socket. The address rules themselves are
`service.core.system.egress`.
"""

from __future__ import annotations

import http.client
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2

from service.core.errors import causes
from service.core.system.egress import (
    AddressPolicy,
    Endpoint,
    IPAddress,
    IPNetwork,
    manifest_urls,
    parse_ip,
)
from service.core.system.manifest import Manifest
from service.settings import Settings

DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "postgres": 5432, "redis": 6379}
DEFAULT_PORTS["rediss"] = 6379
log = logging.getLogger("assaygate.egress")
_said = {"loopback": False}

#: Resolves a host name to its addresses (getaddrinfo by default; tests give their own).
Resolver = Callable[[str, int], list[str]]


class EgressRefused(Exception):
    """A URL or connection the egress policy refuses; `field` names the manifest field."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def refusal_in(exc: BaseException) -> EgressRefused | None:
    """The `EgressRefused` behind `exc`, which a client library may have wrapped."""
    return next((e for e in causes(exc) if isinstance(e, EgressRefused)), None)


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class EgressPolicy:
    """The address rules plus name resolution."""

    def __init__(self, rules: AddressPolicy, resolver: Resolver = system_resolver) -> None:
        self.rules = rules
        self._resolver = resolver

    @classmethod
    def from_settings(
        cls, settings: Settings, resolver: Resolver = system_resolver, tenant: str | None = None
    ) -> EgressPolicy:
        """The service's policy for `tenant`'s URLs (its loopback ports, where they are set per
        tenant: `Settings.egress_loopback_of`): the settings' allowances and its own API,
        database and broker."""
        networks, hosts = _allowlist(settings.egress_allowlist)
        if settings.egress_loopback_deprecated and not _said["loopback"]:
            _said["loopback"] = True  # once a process: every policy built would say it again
            log.warning(
                "ASSAYGATE_EGRESS_ALLOW_LOOPBACK=1 is deprecated: it allows every loopback port "
                "(the control plane and the gate's own relays excepted); name the ports the "
                "agents' local services use instead, e.g. 9000-9100"
            )
        loopback, ports = settings.egress_loopback_of(tenant)
        rules = AddressPolicy(
            allow_loopback=loopback,
            loopback_ports=ports,
            allow_private=settings.egress_private,
            control_plane=control_plane(settings, resolver),
            allowed_networks=networks,
            allowed_hosts=hosts,
        )
        return cls(rules, resolver)

    @classmethod
    def local(cls, resolver: Resolver = system_resolver) -> EgressPolicy:
        """The local `assaygate assay` on a user's own machine: loopback and private addresses
        are the user's business; metadata addresses are still refused."""
        return cls(AddressPolicy(allow_loopback=True, allow_private=True), resolver)

    # -- submission ----------------------------------------------------------------------------
    def check_url(self, url: str, field: str) -> None:
        """Refuse `url` (raise `EgressRefused` naming `field`) if it is not http(s) or names or
        resolves to an address the policy refuses. A name that does not resolve here passes: the
        connection checks it again where it runs."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise EgressRefused(f"not a valid URL: {exc}", field) from None
        if parts.scheme not in ("http", "https"):
            raise EgressRefused(f"scheme {parts.scheme!r} is not http or https", field)
        host = parts.hostname
        if not host:
            raise EgressRefused("the URL names no host", field)
        port = port if port is not None else DEFAULT_PORTS[parts.scheme]
        try:
            self._addresses(host, port, field)
        except OSError:
            return

    def check_manifest(self, manifest: Manifest) -> None:
        """`check_url` for every URL the manifest names, in field order."""
        self.check_urls(manifest_urls(manifest))

    def check_urls(self, urls: Iterable[tuple[str, str]]) -> None:
        """`check_url` for each (field, URL), in order (a manifest read once: `TypedManifest`)."""
        for field, url in urls:
            self.check_url(url, field)

    # -- connection ----------------------------------------------------------------------------
    def resolve(self, host: str, port: int) -> str:
        """The address to connect to for `host`:`port`: every address the name resolves to is
        checked (one forbidden address refuses the name). Raises `EgressRefused`, or `OSError`
        when the name does not resolve."""
        return str(self._addresses(host, port, None)[0])

    def _addresses(self, host: str, port: int, field: str | None) -> list[IPAddress]:
        why = self.rules.host_refusal(host)
        if why is not None:
            raise EgressRefused(why, field)
        literal = parse_ip(host)
        if literal is not None:
            found = [literal]
        else:
            found = [ip for a in self._resolver(host, port) if (ip := parse_ip(a)) is not None]
            if not found:
                raise OSError(f"{host} does not resolve")
        for ip in found:
            why = self.rules.refusal(ip, port, host)
            if why is not None:
                via = "" if literal is not None else f"{host} resolves to {ip}: "
                raise EgressRefused(via + why, field)
        return found

    def connect(
        self, address: tuple[str, int], timeout: float | None = None, source: Any = None
    ) -> socket.socket:
        """`socket.create_connection` to the checked address of `address`."""
        host, port = address
        ip = self.resolve(host, port)
        if timeout is None:
            return socket.create_connection((ip, port), source_address=source)
        return socket.create_connection((ip, port), timeout, source)

    def pin(self, url: Any) -> Any:
        """An httpx/httpx2 URL with its host replaced by the checked address (plain http; an
        https URL keeps its name for TLS, whose certificate check binds it to that name)."""
        port = url.port if url.port is not None else DEFAULT_PORTS.get(url.scheme, 80)
        ip = self.resolve(url.host, port)
        if url.scheme == "http" and ip != url.host:
            return url.copy_with(host=ip)
        return url


class EgressTransport(httpx.BaseTransport):
    """An httpx transport that checks and pins every request it sends (each redirect hop is a
    request of its own)."""

    def __init__(self, policy: EgressPolicy, inner: httpx.BaseTransport | None = None) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.url = self.policy.pin(request.url)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


class AsyncEgressTransport(httpx.AsyncBaseTransport):
    def __init__(self, policy: EgressPolicy, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.url = self.policy.pin(request.url)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class AsyncEgressTransport2(httpx2.AsyncBaseTransport):
    """The same for httpx2, which the MCP SDK's Streamable HTTP client uses."""

    def __init__(
        self, policy: EgressPolicy, inner: httpx2.AsyncBaseTransport | None = None
    ) -> None:
        self.policy = policy
        self.inner = inner if inner is not None else httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = self.policy.pin(request.url)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class HTTPConnection(http.client.HTTPConnection):
    """http.client's connection, connecting only to an address the policy checked."""

    def __init__(self, policy: EgressPolicy, host: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = policy.connect


class HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, policy: EgressPolicy, host: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._create_connection = policy.connect


# -- the control plane ---------------------------------------------------------------------------


def control_plane(settings: Settings, resolver: Resolver = system_resolver) -> tuple[Endpoint, ...]:
    """The gate's own API (its listen address and every address `ASSAYGATE_CONTROL_PLANE` names:
    its advertised URLs, a metrics endpoint), database and broker (and result backend), by
    address and port."""
    out = [_endpoint("API", settings.host, settings.port, resolver)]
    named = [("control plane", item) for item in control_plane_items(settings.control_plane)]
    for name, url in (
        ("database", settings.database_url),
        ("broker", settings.broker_url),
        ("result backend", settings.result_backend),
        *named,
    ):
        endpoint = _url_endpoint(name, url, resolver)
        if endpoint is not None:
            out.append(endpoint)
    return tuple(out)


def control_plane_items(text: str) -> list[str]:
    """`ASSAYGATE_CONTROL_PLANE`'s items as URLs (a bare `host:port` reads as `tcp://host:port`;
    a URL without a port takes its scheme's)."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    return [i if "://" in i else f"tcp://{i}" for i in items]


def _url_endpoint(name: str, url: str, resolver: Resolver) -> Endpoint | None:
    if not url or url.startswith(("sqlite", "filesystem", "memory")):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.split("+", 1)[0]
    host = parts.hostname or "localhost"
    port = port if port is not None else DEFAULT_PORTS.get(scheme)
    if port is None:
        return None
    return _endpoint(name, host, port, resolver)


def _endpoint(name: str, host: str, port: int, resolver: Resolver) -> Endpoint:
    literal = parse_ip(host)
    addresses: set[IPAddress] = set()
    if literal is not None and literal.is_unspecified:
        # Listening on every interface: its loopback aliases and the host's own addresses.
        addresses.update(parse_ip(a) or literal for a in ("127.0.0.1", "::1"))
        addresses.update(_resolved(socket.gethostname(), port, resolver))
    elif literal is not None:
        addresses.add(literal)
    else:
        addresses.update(_resolved(host, port, resolver))
    return Endpoint(name, port, frozenset(addresses))


def _resolved(host: str, port: int, resolver: Resolver) -> Iterable[IPAddress]:
    try:
        found = resolver(host, port)
    except OSError:
        return ()
    return [ip for a in found if (ip := parse_ip(a)) is not None]


def _allowlist(text: str) -> tuple[tuple[IPNetwork, ...], frozenset[str]]:
    networks: list[IPNetwork] = []
    hosts: set[str] = set()
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            hosts.add(item.lower().rstrip("."))
    return tuple(networks), frozenset(hosts)
