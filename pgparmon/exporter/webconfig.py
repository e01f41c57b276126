"""The `--web-config FILE` of `pgparmon exporter`, read and checked whole:
the format every exporter built on Prometheus' exporter toolkit reads
(`--web.config.file`), so that one file format and one Prometheus scrape
config serve the whole fleet.

    tls_server_config:
      cert_file: server.crt          # or cert: (inline PEM)
      key_file: server.key           # or key: (inline PEM)
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt # or client_ca: (inline PEM)
      client_allowed_sans: [prometheus.example.com]
      min_version: TLS12             # TLS10 .. TLS13
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]   # TLS 1.2 and older
      prefer_server_cipher_suites: true
    http_server_config:
      http2: true                    # accepted, no effect: pgparmon answers HTTP/1.0
      headers: {X-Frame-Options: deny}
    basic_auth_users:
      prometheus: $2y$10$...         # bcrypt: htpasswd -nBC 10 "" | tr -d ':\\n'
    rate_limit: {interval: 1s, burst: 20}

What differs from the toolkit, because Python's ssl verifies every client
certificate it asks for: `RequestClientCert` asks for none (it checks none in
the toolkit either: every client gets in, as with `NoClientCert`), and
`RequireAnyClientCert` (a certificate required but never verified) is refused
with the advice to use `RequireAndVerifyClientCert`. `curve_preferences` is
refused (Python's ssl cannot set a list of curves).
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Any


class WebConfigError(ValueError):
    """A web configuration that cannot be used: one line, what to do."""


# ---- the file ----------------------------------------------------------------

TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
TLS_KEYS = {"cert", "key", "client_ca", "cert_file", "key_file", "client_auth_type",
            "client_ca_file", "client_allowed_sans", "min_version", "max_version",
            "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"}
HTTP_KEYS = {"http2", "headers"}
RATE_KEYS = {"interval", "burst"}

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

# the toolkit's client_auth_type values (Go's tls.ClientAuthType names)
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_NONE,
               "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
VERIFYING = {"VerifyClientCertIfGiven", "RequireAndVerifyClientCert"}

# Go's cipher suite names (IANA's) for TLS 1.2 and older, as OpenSSL names them
CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
# TLS 1.3's suites cannot be chosen (in Go as in OpenSSL's cipher list): accepted, no effect
TLS13_CIPHERS = {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                 "TLS_CHACHA20_POLY1305_SHA256"}

# the headers the toolkit lets a configuration add, and their allowed values
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (), "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}

BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
HASH_HOWTO = "make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'"


@dataclass(frozen=True)
class TLSSettings:
    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = None  # inline PEM
    key: str | None = field(default=None, repr=False)  # inline PEM: a secret
    client_ca_file: str | None = None
    client_ca: str | None = None
    client_auth: str = "NoClientCert"
    allowed_sans: tuple[str, ...] | None = None
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3
    ciphers: tuple[str, ...] = ()  # OpenSSL names
    prefer_server_ciphers: bool = True

    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)


@dataclass(frozen=True)
class WebConfig:
    path: str
    tls: TLSSettings | None = None
    users: dict[str, str] = field(default_factory=dict, repr=False)  # user: bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    rate_interval_s: float = 0.0
    rate_burst: int = 0

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"


def _strict_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice (the toolkit's strict
        parsing does: two entries for one user would be ambiguous)."""

    def mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for k, _ in node.value:
            key = loader.construct_object(k, deep=deep)
            if key in seen:
                line = k.start_mark.line + 1
                raise WebConfigError(f"line {line}: {key!r} is given twice")
            seen.add(key)
        return dict(yaml.SafeLoader.construct_mapping(loader, node, deep=deep))

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


def _section(doc: dict[str, Any], name: str, keys: set[str]) -> dict[str, Any]:
    v = doc.get(name)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise WebConfigError(f"{name} must be a mapping of settings")
    unknown = sorted(str(k) for k in v if k not in keys)
    if unknown:
        raise WebConfigError(f"{name}: unknown setting {unknown[0]!r} (known: "
                             f"{', '.join(sorted(keys))})")
    return v


def _str(sec: dict[str, Any], name: str, where: str) -> str | None:
    v = sec.get(name)
    if v is None or v == "":
        return None
    if not isinstance(v, str):
        raise WebConfigError(f"{where}.{name} must be a string")
    return v


def _path(base: str, p: str | None) -> str | None:
    """Relative paths are relative to the web configuration file's directory."""
    return None if p is None else os.path.join(base, os.path.expanduser(p))


def _duration_s(v: Any, where: str) -> float:
    """A Go duration ("1s", "500ms", "1m30s") or 0."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0:
        return 0.0
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    text = str(v).strip() if isinstance(v, str) else ""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not text or "".join(a + u for a, u in parts) != text:
        raise WebConfigError(f"{where} must be a duration such as 1s, 500ms or 1m (or 0)")
    return sum(float(a) * units[u] for a, u in parts)


def parse(path: str) -> WebConfig:
    """Read and check the file (not the certificate files it names)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise WebConfigError(f"cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise WebConfigError("not a text file (UTF-8 YAML expected)") from None
    try:
        doc = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader
    except yaml.MarkedYAMLError as exc:  # the problem and where, never the text (secrets)
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}: " if mark is not None else ""
        raise WebConfigError(f"not valid YAML ({at}{exc.problem or exc.context})") from None
    except yaml.YAMLError:
        raise WebConfigError("not valid YAML") from None
    if doc is None:
        doc = {}  # an empty file: no TLS, no authentication (as the toolkit)
    if not isinstance(doc, dict):
        raise WebConfigError("must be a mapping (tls_server_config, basic_auth_users, ...)")
    unknown = sorted(str(k) for k in doc if k not in TOP_KEYS)
    if unknown:
        raise WebConfigError(f"unknown setting {unknown[0]!r} (known: "
                             f"{', '.join(sorted(TOP_KEYS))})")
    base = os.path.dirname(os.path.abspath(path))
    tls = _parse_tls(_section(doc, "tls_server_config", TLS_KEYS), base)
    http = _section(doc, "http_server_config", HTTP_KEYS)
    if "http2" in http and not isinstance(http["http2"], bool):
        raise WebConfigError("http_server_config.http2 must be true or false")
    headers = _parse_headers(http.get("headers"))
    users = _parse_users(doc.get("basic_auth_users"))
    rate = _section(doc, "rate_limit", RATE_KEYS)
    interval = _duration_s(rate.get("interval", 0), "rate_limit.interval")
    burst = rate.get("burst", 0)
    if not isinstance(burst, int) or isinstance(burst, bool) or burst < 0:
        raise WebConfigError("rate_limit.burst must be a whole number")
    if interval > 0 and burst < 1:
        raise WebConfigError("rate_limit.burst must be at least 1 (0 would refuse every "
                             "request); or set rate_limit.interval to 0")
    return WebConfig(path=os.path.abspath(path), tls=tls, users=users, headers=headers,
                     rate_interval_s=interval, rate_burst=burst)


def _parse_tls(sec: dict[str, Any], base: str) -> TLSSettings | None:
    w = "tls_server_config"
    if not sec or all(v is None or v == "" or v == [] for v in sec.values()):
        return None
    cert_file, key_file = _str(sec, "cert_file", w), _str(sec, "key_file", w)
    cert, key = _str(sec, "cert", w), _str(sec, "key", w)
    ca_file, ca = _str(sec, "client_ca_file", w), _str(sec, "client_ca", w)
    for a, b in (("cert", "cert_file"), ("key", "key_file"), ("client_ca", "client_ca_file")):
        if sec.get(a) and sec.get(b):
            raise WebConfigError(f"{w}: give {a} (inline) or {b}, not both")
    if not (cert_file or cert):
        raise WebConfigError(f"{w}: cert_file is missing (the server's certificate, PEM)")
    if not (key_file or key):
        raise WebConfigError(f"{w}: key_file is missing (the certificate's private key, PEM)")
    auth = _str(sec, "client_auth_type", w) or "NoClientCert"
    if auth in ("RequireAnyClientCert", "RequireClientCert"):
        raise WebConfigError(f"{w}.client_auth_type {auth} (a client certificate required but "
                             "never verified) is not supported: use RequireAndVerifyClientCert "
                             "with client_ca_file")
    if auth not in CLIENT_AUTH:
        raise WebConfigError(f"{w}.client_auth_type {auth!r} is not one of "
                             f"{', '.join([*CLIENT_AUTH, 'RequireAnyClientCert'])}")
    if (ca_file or ca) and auth == "NoClientCert":
        raise WebConfigError(f"{w}: client_ca_file is given but client_auth_type is "
                             "NoClientCert: set client_auth_type: RequireAndVerifyClientCert")
    sans = sec.get("client_allowed_sans")
    if sans is not None:
        if not isinstance(sans, list) or not all(isinstance(s, str) for s in sans):
            raise WebConfigError(f"{w}.client_allowed_sans must be a list of strings")
        if auth not in VERIFYING:
            raise WebConfigError(f"{w}.client_allowed_sans needs client_auth_type "
                                 "RequireAndVerifyClientCert (or VerifyClientCertIfGiven)")
    versions = []
    for name, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        v = sec.get(name) or default
        if v not in TLS_VERSIONS:
            raise WebConfigError(f"{w}.{name} {v!r} is not one of {', '.join(TLS_VERSIONS)}")
        versions.append(TLS_VERSIONS[v])
    if versions[0] > versions[1]:
        raise WebConfigError(f"{w}: min_version is above max_version")
    ciphers: list[str] = []
    suites = sec.get("cipher_suites") or []
    if not isinstance(suites, list):
        raise WebConfigError(f"{w}.cipher_suites must be a list of names")
    for c in suites:
        if c in CIPHERS:
            ciphers.append(CIPHERS[c])
        elif c not in TLS13_CIPHERS:
            raise WebConfigError(f"{w}.cipher_suites: {c!r} is not a cipher suite pgparmon "
                                 "offers (names as Go's crypto/tls writes them, e.g. "
                                 "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
    if sec.get("curve_preferences"):
        raise WebConfigError(f"{w}.curve_preferences is not supported (Python's ssl module "
                             "cannot set a list of curves): remove it")
    prefer = sec.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError(f"{w}.prefer_server_cipher_suites must be true or false")
    return TLSSettings(cert_file=_path(base, cert_file), key_file=_path(base, key_file),
                       cert=cert, key=key, client_ca_file=_path(base, ca_file), client_ca=ca,
                       client_auth=auth, allowed_sans=None if sans is None else tuple(sans),
                       min_version=versions[0], max_version=versions[1],
                       ciphers=tuple(ciphers), prefer_server_ciphers=prefer)


def _parse_headers(v: Any) -> tuple[tuple[str, str], ...]:
    w = "http_server_config.headers"
    if v is None:
        return ()
    if not isinstance(v, dict):
        raise WebConfigError(f"{w} must be a mapping of header: value")
    out = []
    for k, val in v.items():
        if k not in HEADERS:
            raise WebConfigError(f"{w}: the header {str(k)!r} cannot be set (only "
                                 f"{', '.join(HEADERS)})")
        if val is None or val == "":
            continue  # blank: unset
        if not isinstance(val, str) or "\n" in val or "\r" in val:
            raise WebConfigError(f"{w}.{k} must be a one-line string")
        if HEADERS[k] and val not in HEADERS[k]:
            raise WebConfigError(f"{w}.{k} must be one of {', '.join(HEADERS[k])}")
        out.append((str(k), val))
    return tuple(out)


def _parse_users(v: Any) -> dict[str, str]:
    w = "basic_auth_users"
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise WebConfigError(f"{w} must be a mapping of user: bcrypt hash")
    users: dict[str, str] = {}
    for k, h in v.items():
        if isinstance(k, bool) or not isinstance(k, (str, int)) or str(k) == "":
            raise WebConfigError(f"{w}: a user name must be a non-empty string")
        user = str(k)
        if ":" in user:
            raise WebConfigError(f"{w}: the user name {user!r} holds ':' (basic auth cannot "
                                 "carry it)")
        if not isinstance(h, str) or not BCRYPT_HASH.match(h.strip()):
            # never the value: it may be a password written where its hash belongs
            raise WebConfigError(f"{w}: the password of {user!r} is not a bcrypt hash "
                                 f"({HASH_HOWTO})")
        cost = int(BCRYPT_HASH.match(h.strip()).group(1))  # type: ignore[union-attr]
        if not 4 <= cost <= 31:
            raise WebConfigError(f"{w}: the bcrypt hash of {user!r} has cost {cost} "
                                 "(4 to 31)")
        users[user] = h.strip()
    return users

