"""An environment's egress policy, as data: what a session of an `allowlist` environment may reach.

One policy per tenant × environment, a JSON document:

    {"egress": "allowlist",
     "allow": [{"host": "api.example.com", "ports": [443],
                "credential": {"header": "Authorization", "template": "Bearer {secret:crm-token}"}},
               {"host": "*.example.org"}],
     "packages": ["tabulate==0.9.0", "six"]}

- `egress`: `allowlist` (only what `allow` and `packages` name) or `none` (nothing). An
  environment created `public` or `none` has no proxy in its path; its stored policy can only
  close it further (`none`).
- `allow`: a host (`api.example.com`) or a suffix (`*.example.com`: its subdomains, not itself),
  with its ports (default 443) and an optional credential the egress proxy adds to every HTTPS
  request to that host: a header whose value template names the tenant's secrets
  (`{secret:NAME}`). The secret's value is read by the proxy, never by the session.
- `packages`: the names (optionally `==VERSION`) that `pip install` may fetch through the stage's
  package index.

Refused, with the field named: a bare `*` or a suffix of a top-level domain, an IP literal of any
spelling (dotted, decimal, octal, hex, IPv6), a credential on a rule that lists plain-HTTP port 80
(the proxy only adds credentials after TLS interception), a secret name of the wrong shape or not
among the tenant's own secrets, a header the proxy owns (`Host`, `Proxy-Authorization`, framing
headers), a package name or version of the wrong shape.

Standard library only: the stage config (synth), `sandboxctl egress set`, dispatch and the egress
proxy's own virtual environment all parse policies with this module.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .naming import SECRET_NAME_RE

ALLOWLIST, NONE, PUBLIC = "allowlist", "none", "public"
EGRESS_MODES: tuple[str, ...] = (NONE, ALLOWLIST, PUBLIC)
STORED_MODES: tuple[str, ...] = (ALLOWLIST, NONE)  # what a stored policy may say
DEFAULT_PORTS: tuple[int, ...] = (443,)
PLAIN_HTTP_PORT = 80
MAX_ALLOW_RULES = 100
MAX_PACKAGES = 200
MAX_PORTS = 16
MAX_HEADER_VALUE_TEMPLATE = 512

_LABEL_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_PLACEHOLDER_RE = re.compile(r"\{secret:([^{}]*)\}")
_PACKAGE_RE = re.compile(
    r"^([A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)(?:==([A-Za-z0-9.+!_-]{1,64}))?$"
)
# Headers the proxy itself owns: a rule may not set them.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "proxy-authorization",
        "proxy-connection",
        "connection",
        "content-length",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
    }
)


class PolicyError(ValueError):
    """A policy that must not be stored or synthesized. `field` is where (`allow[2].host`)."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.reason = message


@dataclass(frozen=True)
class Credential:
    header: str
    template: str  # e.g. "Bearer {secret:crm-token}"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secret names the template reads, in order of first use."""
        return tuple(dict.fromkeys(_PLACEHOLDER_RE.findall(self.template)))

    def render(self, values: Mapping[str, str]) -> str:
        """The header value with each `{secret:NAME}` replaced by `values[NAME]`."""
        return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], self.template)

    def as_dict(self) -> dict[str, str]:
        return {"header": self.header, "template": self.template}


@dataclass(frozen=True)
class AllowRule:
    host: str  # "api.example.com" or "*.example.com"
    ports: tuple[int, ...] = DEFAULT_PORTS
    credential: Credential | None = None

    @property
    def is_suffix(self) -> bool:
        return self.host.startswith("*.")

    def matches(self, host: str, port: int) -> bool:
        """`host` is already normalized (lower case, no trailing dot)."""
        if port not in self.ports:
            return False
        if self.is_suffix:
            return host.endswith(self.host[1:]) and host != self.host[2:]
        return host == self.host

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"host": self.host, "ports": list(self.ports)}
        if self.credential is not None:
            out["credential"] = self.credential.as_dict()
        return out


@dataclass(frozen=True)
class Package:
    name: str  # normalized (PEP 503)
    version: str | None = None

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}=={self.version}"


@dataclass(frozen=True)
class EgressPolicy:
    egress: str = ALLOWLIST
    allow: tuple[AllowRule, ...] = ()
    packages: tuple[Package, ...] = field(default_factory=tuple)

    @property
    def closed(self) -> bool:
        return self.egress == NONE

    def rule_for(self, host: str, port: int) -> AllowRule | None:
        """The first rule that allows `host:port` (exact hosts before suffixes), else None."""
        if self.closed:
            return None
        host = normalize_host(host)
        exact = next((r for r in self.allow if not r.is_suffix and r.matches(host, port)), None)
        return exact or next((r for r in self.allow if r.is_suffix and r.matches(host, port)), None)

    def package(self, name: str) -> Package | None:
        """The listed package of that (any-spelling) name, else None."""
        if self.closed:
            return None
        wanted = normalize_package(name)
        return next((p for p in self.packages if p.name == wanted), None)

    @property
    def secrets(self) -> tuple[str, ...]:
        found: list[str] = []
        for rule in self.allow:
            if rule.credential is not None:
                found.extend(rule.credential.secrets)
        return tuple(dict.fromkeys(found))

    def as_dict(self) -> dict[str, Any]:
        return {
            "egress": self.egress,
            "allow": [r.as_dict() for r in self.allow],
            "packages": [str(p) for p in self.packages],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"), sort_keys=True)


CLOSED = EgressPolicy(egress=NONE)
EMPTY_ALLOWLIST = EgressPolicy(egress=ALLOWLIST)


def normalize_host(host: str) -> str:
    return host.strip().lower().rstrip(".")


def normalize_package(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_ip_literal(host: str) -> bool:
    """Any spelling of an address: dotted, IPv6 (bracketed or not), or a name whose last label is
    all digits or hex (`2130706433`, `0177.0.0.1`, `0x7f.1`), which resolvers read as an address."""
    text = host.strip().strip("[]")
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    last = text.rstrip(".").rsplit(".", 1)[-1].lower()
    return bool(last) and (last.isdigit() or bool(re.fullmatch(r"0x[0-9a-f]*", last)))


def _host(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PolicyError(where, "a host name is required")
    host = normalize_host(value)
    if host == "*" or host in ("*.", ""):
        raise PolicyError(where, "a bare * would allow every host; list the hosts")
    if is_ip_literal(host.removeprefix("*.")):
        raise PolicyError(where, f"{value!r} is an IP address; list host names only")
    if "@" in host or "/" in host or "%" in host or ":" in host:
        raise PolicyError(where, f"{value!r} is not a host name (ports go in `ports`)")
    name = host[2:] if host.startswith("*.") else host
    labels = name.split(".")
    if "*" in name:
        raise PolicyError(where, "a wildcard may only be a leading '*.'")
    if len(name) > 253 or not all(_LABEL_RE.match(label) for label in labels):
        raise PolicyError(where, f"{value!r} is not a host name")
    if len(labels) < 2:
        raise PolicyError(
            where, f"{value!r} " + ("is a top-level domain" if host.startswith("*.") else "needs a domain")
        )
    return host


def _ports(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return DEFAULT_PORTS
    if not isinstance(value, (list, tuple)) or not value or len(value) > MAX_PORTS:
        raise PolicyError(where, f"a list of 1 to {MAX_PORTS} ports")
    ports: list[int] = []
    for i, port in enumerate(value):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise PolicyError(f"{where}[{i}]", "a port is an integer from 1 to 65535")
        ports.append(port)
    return tuple(dict.fromkeys(ports))


def _credential(
    value: Any, where: str, ports: tuple[int, ...], secrets: Collection[str] | None
) -> Credential:
    if not isinstance(value, Mapping) or set(value) - {"header", "template"}:
        raise PolicyError(where, "a credential is {header, template}")
    header, template = value.get("header"), value.get("template")
    if not isinstance(header, str) or not _HEADER_RE.match(header):
        raise PolicyError(f"{where}.header", "an HTTP header name (letters, digits, -)")
    if header.lower() in RESERVED_HEADERS:
        raise PolicyError(f"{where}.header", f"{header} is set by the proxy itself")
    if not isinstance(template, str) or not template or len(template) > MAX_HEADER_VALUE_TEMPLATE:
        raise PolicyError(
            f"{where}.template", f"a header value of 1 to {MAX_HEADER_VALUE_TEMPLATE} characters"
        )
    if any(c in template for c in "\r\n\0"):
        raise PolicyError(f"{where}.template", "a header value is one line")
    names = _PLACEHOLDER_RE.findall(template)
    if not names:
        raise PolicyError(f"{where}.template", "names no secret: use {secret:NAME}")
    if "{" in _PLACEHOLDER_RE.sub("", template) or "}" in _PLACEHOLDER_RE.sub("", template):
        raise PolicyError(f"{where}.template", "braces only in {secret:NAME}")
    for name in names:
        if not SECRET_NAME_RE.match(name):
            raise PolicyError(
                f"{where}.template", f"secret name {name!r} must match {SECRET_NAME_RE.pattern}"
            )
        if secrets is not None and name not in secrets:
            raise PolicyError(f"{where}.template", f"secret {name!r} is not one of the tenant's secrets")
    if PLAIN_HTTP_PORT in ports:
        raise PolicyError(where, "a credential is only sent over HTTPS; this rule lists port 80")
    return Credential(header=header, template=template)


def _package(value: Any, where: str) -> Package:
    match = _PACKAGE_RE.match(value) if isinstance(value, str) else None
    if match is None:
        raise PolicyError(where, "a package is NAME or NAME==VERSION")
    return Package(name=normalize_package(match.group(1)), version=match.group(2))


def parse_policy(data: Any, *, secrets: Collection[str] | None = None) -> EgressPolicy:
    """A policy from its JSON form (a mapping, or JSON text). `secrets`: the tenant's secret names,
    when known (synth, sandboxctl); None skips that one check (the proxy reads stored policies that
    were checked when written, and a missing secret is a refusal there, not a crash)."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except ValueError:
            raise PolicyError("policy", "not valid JSON") from None
    if not isinstance(data, Mapping):
        raise PolicyError("policy", "a JSON object {egress, allow, packages}")
    unknown = set(data) - {"egress", "allow", "packages"}
    if unknown:
        raise PolicyError(sorted(unknown)[0], "unknown field")
    mode = data.get("egress", ALLOWLIST)
    if mode not in STORED_MODES:
        raise PolicyError("egress", f"one of {', '.join(STORED_MODES)}")
    allow_raw = data.get("allow", []) or []
    packages_raw = data.get("packages", []) or []
    if not isinstance(allow_raw, (list, tuple)) or len(allow_raw) > MAX_ALLOW_RULES:
        raise PolicyError("allow", f"a list of at most {MAX_ALLOW_RULES} rules")
    if not isinstance(packages_raw, (list, tuple)) or len(packages_raw) > MAX_PACKAGES:
        raise PolicyError("packages", f"a list of at most {MAX_PACKAGES} names")
    if mode == NONE and (allow_raw or packages_raw):
        raise PolicyError("egress", "a policy of 'none' allows nothing: leave allow and packages empty")
    rules: list[AllowRule] = []
    seen: set[str] = set()
    for i, raw in enumerate(allow_raw):
        where = f"allow[{i}]"
        if isinstance(raw, str):
            raw = {"host": raw}
        if not isinstance(raw, Mapping) or set(raw) - {"host", "ports", "credential"}:
            raise PolicyError(where, "a rule is {host, ports?, credential?}")
        host = _host(raw.get("host"), f"{where}.host")
        if host in seen:
            raise PolicyError(f"{where}.host", f"{host} is listed twice")
        seen.add(host)
        ports = _ports(raw.get("ports"), f"{where}.ports")
        cred = raw.get("credential")
        rules.append(
            AllowRule(
                host=host,
                ports=ports,
                credential=None if cred is None else _credential(cred, f"{where}.credential", ports, secrets),
            )
        )
    packages: list[Package] = []
    for i, raw in enumerate(packages_raw):
        package = _package(raw, f"packages[{i}]")
        if any(p.name == package.name for p in packages):
            raise PolicyError(f"packages[{i}]", f"{package.name} is listed twice")
        packages.append(package)
    return EgressPolicy(egress=mode, allow=tuple(rules), packages=tuple(packages))


def parse_allow_spec(spec: str, where: str = "allow") -> dict[str, Any]:
    """`HOST[:PORT]` as written on the command line (`sandboxctl egress set --allow`)."""
    host, sep, port = spec.rpartition(":") if spec.count(":") == 1 else (spec, "", "")
    if not sep:
        return {"host": spec}
    if not port.isdigit():
        raise PolicyError(where, f"{spec!r}: the port after ':' must be a number")
    return {"host": host, "ports": [int(port)]}


def merge_allow_specs(specs: Iterable[str]) -> list[dict[str, Any]]:
    """Command-line allow entries, one rule per host (`--allow a.com --allow a.com:8443` → ports
    [443, 8443]): a host's ports are the union of its entries, 443 when none names one."""
    rules: dict[str, dict[str, Any]] = {}
    for i, spec in enumerate(specs):
        rule = parse_allow_spec(spec, f"allow[{i}]")
        host = normalize_host(str(rule["host"]))
        entry = rules.setdefault(host, {"host": host, "ports": []})
        entry["ports"].extend(rule.get("ports", list(DEFAULT_PORTS)))
    for entry in rules.values():
        entry["ports"] = list(dict.fromkeys(entry["ports"]))
    return list(rules.values())
