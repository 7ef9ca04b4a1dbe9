"""The egress policy's pure half: which addresses a manifest's URLs may reach (docs/operations.md,
"Egress policy").

No I/O here: hosts arrive already resolved (`service.net.egress` resolves them, at submission and
again at connection). Never a target, whatever the operator allows: link-local and cloud metadata
addresses, unspecified, multicast, broadcast and reserved addresses, and the gate's own control
plane (the API's listen and advertised addresses, the database and the broker, by address and
port, loopback aliases included) and the gate's own loopback listeners (`GATE_LOOPBACK_NETWORK`).
Loopback (per port where the operator names ports) and private ranges only where the operator
allows them, or where an allowlist names the network or the host.
"""

from __future__ import annotations

import ipaddress
import sys
from dataclasses import dataclass, field

from service.core.system.execution import Execution
from service.core.system.manifest import Manifest, contract_of, parts_of

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Link-local ranges (where every cloud's instance metadata lives) and the metadata addresses
#: outside them (Alibaba, AWS over IPv6, Azure's wire server).
METADATA_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "169.254.0.0/16",
        "fe80::/10",
        "100.100.100.200/32",
        "fd00:ec2::254/128",
        "168.63.129.16/32",
    )
)
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.com",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
#: "This network": connecting to 0.0.0.0 reaches the host itself.
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
BROADCAST = ipaddress.ip_address("255.255.255.255")
LOOPBACK_NETWORKS: tuple[IPNetwork, ...] = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
)


#: Where the gate's own loopback listeners live (the sandboxes' inbound relays, each trial's MCP
#: proxy, the python target's tool server): an address of their own, never a target, so a
#: loopback allowance for the agents' local services never reaches another trial's proxy or
#: another tenant's relay. Linux routes all of 127/8 to `lo`; elsewhere (no sandbox runs there)
#: the one loopback address there is.
GATE_LOOPBACK_NETWORK = ipaddress.ip_network("127.77.0.0/16")
GATE_LOOPBACK_HOST = "127.77.0.1" if sys.platform.startswith("linux") else "127.0.0.1"

PortRange = tuple[int, int]


def parse_port_ranges(text: str) -> tuple[PortRange, ...]:
    """`9000-9100,9443` as inclusive ranges; raises ValueError naming the bad item."""
    out: list[PortRange] = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        low, sep, high = item.partition("-")
        try:
            first, last = int(low), int(high if sep else low)
        except ValueError:
            raise ValueError(f"{item!r} is not a port or a range of ports (9000-9100)") from None
        if not 1 <= first <= last <= 65535:
            raise ValueError(f"{item!r} is not a range of ports between 1 and 65535")
        out.append((first, last))
    if not out:
        raise ValueError("no port or range of ports given")
    return tuple(out)


def parse_tenant_ports(text: str) -> dict[str, tuple[PortRange, ...]]:
    """`acme=9000-9100,9443;globex=9200` as each tenant's port ranges; raises ValueError naming
    the bad item, a tenant named twice, or a port two tenants would share."""
    found: dict[str, tuple[PortRange, ...]] = {}
    for item in (i.strip() for i in text.split(";")):
        if not item:
            continue
        tenant, sep, ports = (part.strip() for part in item.partition("="))
        if not sep or not tenant:
            raise ValueError(f"{item!r} is not TENANT=PORTS (acme=9000-9100,9443)")
        if tenant in found:
            raise ValueError(f"tenant {tenant!r} is named twice")
        ranges = parse_port_ranges(ports)
        for other, theirs in found.items():
            for low, high in ranges:
                if any(low <= t_high and t_low <= high for t_low, t_high in theirs):
                    raise ValueError(
                        f"tenants {other!r} and {tenant!r} share loopback ports "
                        f"({low}-{high}): each port is one tenant's"
                    )
        found[tenant] = ranges
    return found


def parse_ip(text: str) -> IPAddress | None:
    """`text` as an IP address the way a resolver reads it, or None for a name: dotted quads,
    the inet_aton shorthands (`2130706433`, `0x7f.1`, `0177.0.0.1`), bracketed or scoped IPv6.
    IPv4-mapped and IPv4-compatible IPv6 addresses are returned as the IPv4 address they reach."""
    text = text.strip().strip("[]")
    if "%" in text:
        text = text.split("%", 1)[0]
    try:
        ip: IPAddress = ipaddress.ip_address(text)
    except ValueError:
        v4 = _inet_aton(text)
        if v4 is None:
            return None
        ip = v4
    return _unmapped(ip)


def _unmapped(ip: IPAddress) -> IPAddress:
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        # ::a.b.c.d (deprecated IPv4-compatible) and 64:ff9b::a.b.c.d (NAT64) reach IPv4 too.
        packed = ip.packed
        if packed[:12] == bytes(12) and int(ip) > 1:
            return ipaddress.IPv4Address(packed[12:])
        if ip in ipaddress.ip_network("64:ff9b::/96"):
            return ipaddress.IPv4Address(packed[12:])
    return ip


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """inet_aton's forms: one to four parts, each decimal, octal (leading 0) or hex (0x)."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers: list[int] = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part[1:], 8))
            else:
                if not part.isdigit():
                    return None
                numbers.append(int(part))
        except ValueError:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


@dataclass(frozen=True)
class Endpoint:
    """One of the gate's own services: its addresses (empty with `any_address`: it listens on
    every interface) and its port."""

    name: str
    port: int
    addresses: frozenset[IPAddress] = frozenset()
    any_address: bool = False

    def covers(self, ip: IPAddress, port: int) -> bool:
        if port != self.port:
            return False
        if self.any_address or ip in self.addresses:
            return True
        # A loopback listener answers on every loopback alias (127.0.0.2, ::1, ::ffff:127.0.0.1).
        return _loopback(ip) and any(_loopback(a) for a in self.addresses)


def _loopback(ip: IPAddress) -> bool:
    return any(ip in n for n in LOOPBACK_NETWORKS)


@dataclass(frozen=True)
class AddressPolicy:
    """Which resolved addresses a manifest's URLs may reach."""

    allow_loopback: bool = False
    # With `allow_loopback`: only these loopback ports (empty: every port). The control plane
    # and the gate's own listeners stay refused either way.
    loopback_ports: tuple[PortRange, ...] = ()
    allow_private: bool = False
    control_plane: tuple[Endpoint, ...] = ()
    allowed_networks: tuple[IPNetwork, ...] = ()
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)

    def host_refusal(self, host: str) -> str | None:
        """Why a host name is refused before it is resolved (None: resolve it)."""
        name = host.lower().rstrip(".")
        if name in METADATA_HOSTS:
            return f"{host} is a cloud metadata service, never a target"
        return None

    def refusal(self, ip: IPAddress, port: int, host: str | None = None) -> str | None:
        """Why connecting to `ip`:`port` (named `host` in the URL) is refused; None: allowed."""
        ip = _unmapped(ip)
        if any(ip in n for n in METADATA_NETWORKS):
            return f"{ip} is link-local or a cloud metadata address, never a target"
        if ip.is_unspecified or ip in THIS_NETWORK:
            return f"{ip} is the unspecified address, never a target"
        if ip.is_multicast or ip == BROADCAST:
            return f"{ip} is a multicast or broadcast address, never a target"
        if ip in GATE_LOOPBACK_NETWORK:
            return f"{ip} is the gate's own relays and proxies, never a target"
        for endpoint in self.control_plane:
            if endpoint.covers(ip, port):
                return f"{ip}:{port} is the gate's own {endpoint.name}, never a target"
        allowed = (host is not None and host.lower().rstrip(".") in self.allowed_hosts) or any(
            ip in n for n in self.allowed_networks
        )
        if _loopback(ip):
            if allowed or (self.allow_loopback and self._loopback_port(port)):
                return None
            if self.allow_loopback:
                return (
                    f"{ip}:{port} is a loopback port outside ASSAYGATE_EGRESS_ALLOW_LOOPBACK's "
                    "ranges"
                )
            return f"{ip} is a loopback address (ASSAYGATE_EGRESS_ALLOW_LOOPBACK is off)"
        if ip.is_reserved and isinstance(ip, ipaddress.IPv4Address):
            return f"{ip} is a reserved address, never a target"
        if not ip.is_global:
            if self.allow_private or allowed:
                return None
            return f"{ip} is a private address (ASSAYGATE_EGRESS_ALLOW_PRIVATE is off)"
        return None

    def _loopback_port(self, port: int) -> bool:
        return not self.loopback_ports or any(a <= port <= b for a, b in self.loopback_ports)


def manifest_urls(manifest: Manifest) -> tuple[tuple[str, str], ...]:
    """Every URL a manifest names, with its field (the remote parts of `parts_of`)."""
    out: list[tuple[str, str]] = []
    contract = contract_of(manifest) if manifest.target.kind == "mcp" else None
    for part in parts_of(manifest):
        if part.execution is not Execution.REMOTE:
            continue
        url: str | None = None
        path = part.field.split(".")
        if part.field == "manifest.target.url":
            url = manifest.target.url
        elif part.field == "manifest.target.runner.url":
            assert manifest.target.runner is not None
            url = manifest.target.runner.url
        elif contract is not None and path[1:3] == ["tools", "servers"]:
            url = contract.servers[path[3]].url
        elif contract is not None and path[1:3] == ["tools", "hooks"]:
            hook = getattr(contract.hooks, path[3])
            url = hook.url if hook is not None else None
        if url is not None:
            out.append((part.field, url))
    return tuple(out)
