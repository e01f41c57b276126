"""`pgparmon exporter --web-config FILE`: TLS and basic authentication for
/metrics, configured as every exporter built on Prometheus' exporter toolkit
is (`--web.config.file`), so that one file format and one Prometheus scrape
config (`scheme: https`, `tls_config`, `basic_auth`) serve the whole fleet.

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

TLS is Python's ssl module (OpenSSL); the hashes are checked with PyCA's
bcrypt, one check at a time, and a user's last good password is remembered
as a keyed digest (never the password), compared in constant time, so that a
scrape every 15 s costs one HMAC, not a bcrypt run. An unknown user costs a
bcrypt run of the same cost as the known ones (no user enumeration by time).

The file and the certificate, key and CA files it names are checked on each
new connection (a stat each): when one changed they are read again, so a
renewed certificate is served without a restart; a file that no longer loads
is said once on stderr and the previous configuration stays in force.

What differs from the toolkit, because Python's ssl verifies every client
certificate it asks for: `RequestClientCert` asks for none (it checks none in
the toolkit either: every client gets in, as with `NoClientCert`), and
`RequireAnyClientCert` (a certificate required but never verified) is refused
with the advice to use `RequireAndVerifyClientCert`. `curve_preferences` is
refused (Python's ssl cannot set a list of curves).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import socket
import ssl
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..redact import redact_text


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


# ---- TLS -----------------------------------------------------------------------

def _refuse_passphrase() -> bytes:
    raise WebConfigError("the private key is encrypted: give a key without a passphrase "
                         "(readable by this user only)")


@contextlib.contextmanager
def _pem_file(pem: str, what: str) -> Any:
    """An inline PEM as a file for OpenSSL, in memory (memfd): never on disk."""
    if not hasattr(os, "memfd_create"):
        raise WebConfigError(f"tls_server_config.{what} (inline) needs Linux: give "
                             f"{what}_file")
    fd = os.memfd_create(f"pgparmon-{what}", getattr(os, "MFD_CLOEXEC", 0))
    try:
        os.write(fd, pem.encode())
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _ssl_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(exc.reason or exc.strerror or exc).replace("_", " ").lower()
    if isinstance(exc, OSError):
        return str(exc.strerror or exc)
    return str(exc)


def tls_context(t: TLSSettings) -> ssl.SSLContext:
    """The server's SSLContext. WebConfigError (one line) when a file
    cannot be read or does not hold what it should."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.minimum_version = t.min_version
        ctx.maximum_version = t.max_version
    except (ValueError, ssl.SSLError) as exc:
        raise WebConfigError(f"tls_server_config: this OpenSSL refuses those TLS versions: "
                             f"{_ssl_reason(exc)}") from None
    if t.ciphers:
        try:
            ctx.set_ciphers(":".join(t.ciphers))
        except ssl.SSLError:
            raise WebConfigError("tls_server_config.cipher_suites: this OpenSSL offers none "
                                 "of them") from None
    if t.prefer_server_ciphers:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    with contextlib.ExitStack() as stack:
        cert = t.cert_file or stack.enter_context(_pem_file(t.cert or "", "cert"))
        key = t.key_file or stack.enter_context(_pem_file(t.key or "", "key"))
        try:
            ctx.load_cert_chain(cert, key, password=_refuse_passphrase)
        except OSError as exc:  # ssl.SSLError included
            which = ("cert_file " + t.cert_file if t.cert_file else "cert") + " / " + \
                ("key_file " + t.key_file if t.key_file else "key")
            raise WebConfigError(f"cannot load the certificate and key ({which}): "
                                 f"{_ssl_reason(exc)}") from None
    ctx.verify_mode = CLIENT_AUTH[t.client_auth]
    if t.client_auth in VERIFYING:
        try:
            if t.client_ca_file:
                ctx.load_verify_locations(cafile=t.client_ca_file)
            elif t.client_ca:
                ctx.load_verify_locations(cadata=t.client_ca)
            else:  # as Go: the system's roots
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        except (OSError, ValueError) as exc:
            src = t.client_ca_file or "client_ca"
            raise WebConfigError(f"cannot load the client CA {src}: {_ssl_reason(exc)}") \
                from None
    return ctx


def sans_allowed(peer: dict[str, Any] | None, allowed: Iterable[str]) -> bool:
    """Whether the verified client certificate names one of `allowed` among
    its subject alternative names (DNS, IP address, e-mail, URI)."""
    if not peer:
        return False
    want_ips, want = set(), set()
    for a in allowed:
        try:
            want_ips.add(ipaddress.ip_address(a))
        except ValueError:
            want.add(a)
    for kind, value in peer.get("subjectAltName", ()):
        if kind == "IP Address":
            with contextlib.suppress(ValueError):
                if ipaddress.ip_address(value.strip()) in want_ips:
                    return True
        elif kind in ("DNS", "email", "URI") and value in want:
            return True
    return False


# ---- basic auth ------------------------------------------------------------------

class BasicAuth:
    """Checks user and password against the bcrypt hashes. One bcrypt run at
    a time (it is slow on purpose); a good password is remembered as an HMAC
    under a key made at start, per user and hash, and compared in constant
    time: the next scrapes cost no bcrypt run. `checks` counts bcrypt runs."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._good: dict[str, tuple[str, bytes]] = {}  # user: (hash, HMAC of the password)
        self._bcrypt = threading.Lock()
        self._dummy: dict[int, bytes] = {}
        self.checks = 0

    def _digest(self, user: str, password: bytes) -> bytes:
        return hmac.new(self._key, user.encode() + b"\0" + password, hashlib.sha256).digest()

    def _dummy_hash(self, cost: int) -> bytes:
        """A hash of the same cost for an unknown user: as slow to refuse."""
        import bcrypt

        if cost not in self._dummy:
            salt = bcrypt.gensalt(rounds=cost)
            self._dummy[cost] = salt + b"." * 31
        return self._dummy[cost]

    def check(self, users: dict[str, str], user: str, password: bytes) -> bool:
        import bcrypt

        stored = users.get(user)
        digest = self._digest(user, password)
        good = self._good.get(user)
        if stored is not None and good is not None and good[0] == stored and \
                hmac.compare_digest(good[1], digest):
            return True
        if stored is not None:
            hashed = stored.encode()
        else:
            cost = max((int(h[4:6]) for h in users.values()), default=10)
            hashed = self._dummy_hash(cost)
        with self._bcrypt:
            self.checks += 1
            try:
                ok = bcrypt.checkpw(password, hashed)
            except ValueError:  # over 72 bytes, or a hash bcrypt refuses
                ok = False
        if ok and stored is not None:
            self._good[user] = (stored, digest)
            return True
        return False


def basic_credentials(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) from an Authorization header, None when it holds none."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = raw.partition(b":")
    if not sep:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


class RateLimit:
    """A token bucket: `burst` requests at once, then one per `interval`."""

    def __init__(self, interval_s: float, burst: int) -> None:
        self.interval_s = interval_s
        self.burst = burst
        self.tokens = float(burst)
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def allow(self) -> bool:
        with self.lock:
            now = time.monotonic()
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) / self.interval_s)
            self.last = now
            if self.tokens >= 1.0:
                self.tokens -= 1.0
                return True
            return False


# ---- the configuration in force ------------------------------------------------------

class Quiet:
    """One line on stderr per kind of event and minute at most."""

    def __init__(self, log: Callable[[str], None], every_s: float = 60.0) -> None:
        self.log = log
        self.every_s = every_s
        self.last: dict[str, float] = {}
        self.held: dict[str, int] = {}
        self.lock = threading.Lock()

    def say(self, kind: str, msg: str) -> None:
        with self.lock:
            now = time.monotonic()
            if now - self.last.get(kind, -1e9) < self.every_s:
                self.held[kind] = self.held.get(kind, 0) + 1
                return
            n = self.held.pop(kind, 0)
            self.last[kind] = now
        self.log(msg + (f" ({n} more since the last such line)" if n else ""))


class Web:
    """The web configuration in force: loaded at start (WebConfigError: the
    exporter does not start), then read again when the file or a file it
    names changes (checked on each new connection)."""

    def __init__(self, path: str, log: Callable[[str], None]) -> None:
        self.path = path
        self.log = log
        self.quiet = Quiet(log)
        self.auth = BasicAuth()
        self.lock = threading.Lock()
        self.config, self.context = self._load()
        self.limit = self._limit(self.config)
        self.stamp = self._stamp(self.config)
        self.warn_open_files(self.config)

    def _load(self) -> tuple[WebConfig, ssl.SSLContext | None]:
        cfg = parse(self.path)
        return cfg, tls_context(cfg.tls) if cfg.tls is not None else None

    @staticmethod
    def _limit(cfg: WebConfig) -> RateLimit | None:
        return RateLimit(cfg.rate_interval_s, cfg.rate_burst) if cfg.rate_interval_s > 0 \
            else None

    def _stamp(self, cfg: WebConfig) -> tuple[object, ...]:
        out: list[object] = []
        for p in (self.path, *(cfg.tls.files() if cfg.tls else ())):
            try:
                st = os.stat(p)
                out.append((p, st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError as exc:
                out.append((p, exc.errno))
        return tuple(out)

    def warn_open_files(self, cfg: WebConfig) -> None:
        """The private key, and the file of hashes, should be this user's alone."""
        for what, p in (("the web configuration", cfg.path),
                        ("the TLS key", cfg.tls.key_file if cfg.tls else None)):
            if not p:
                continue
            with contextlib.suppress(OSError):
                mode = stat.S_IMODE(os.stat(p).st_mode)
                if mode & stat.S_IROTH:
                    self.log(f"{what} {p} can be read by every user (mode {mode:04o}): "
                             f"chmod 600 {p} (or 640 with a group of its readers)")

    def current(self) -> tuple[WebConfig, ssl.SSLContext | None, RateLimit | None]:
        with self.lock:
            stamp = self._stamp(self.config)
            if stamp != self.stamp:
                self.stamp = stamp
                try:
                    cfg, ctx = self._load()
                except WebConfigError as exc:
                    self.log(f"--web-config {self.path}: {exc}; the previous configuration "
                             "stays in force")
                else:
                    if (cfg.rate_interval_s, cfg.rate_burst) != \
                            (self.config.rate_interval_s, self.config.rate_burst):
                        self.limit = self._limit(cfg)
                    self.config, self.context = cfg, ctx
                    self.stamp = self._stamp(cfg)
                    self.log(f"--web-config {self.path}: read again ({describe(cfg)})")
                    self.warn_open_files(cfg)
            return self.config, self.context, self.limit


def describe(cfg: WebConfig | None) -> str:
    if cfg is None:
        return "plain HTTP, no authentication"
    parts = ["TLS" if cfg.tls else "plain HTTP"]
    if cfg.tls and cfg.tls.client_auth in VERIFYING:
        parts.append(f"client certificates ({cfg.tls.client_auth})")
    parts.append(f"basic auth ({len(cfg.users)} user{'s' if len(cfg.users) != 1 else ''})"
                 if cfg.users else "no basic auth")
    if cfg.rate_interval_s:
        parts.append(f"rate limit {cfg.rate_burst} then 1 per {cfg.rate_interval_s:g}s")
    return ", ".join(parts)


# ---- the HTTP server --------------------------------------------------------------------

def guard(app: Callable[..., Any], web: Web) -> Callable[..., Any]:
    """The WSGI app behind the rate limit, the configured headers and basic
    auth. A refused request logs no credential."""

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        cfg, _, limit = web.current()
        extra = list(cfg.headers)

        def respond(status: str, headers: list[tuple[str, str]], *a: Any) -> Any:
            return start_response(status, [*headers, *extra], *a)

        def refuse(status: str, more: list[tuple[str, str]]) -> list[bytes]:
            body = f"{status}\n".encode()
            respond(status, [("Content-Type", "text/plain; charset=utf-8"),
                             ("Content-Length", str(len(body))), *more])
            return [body]

        if limit is not None and not limit.allow():
            return refuse("429 Too Many Requests", [])
        if cfg.users:
            cred = basic_credentials(environ.get("HTTP_AUTHORIZATION"))
            if cred is None or not web.auth.check(cfg.users, cred[0], cred[1]):
                if cred is not None:
                    web.quiet.say("auth", f"refused a request from "
                                  f"{environ.get('REMOTE_ADDR', '?')}: wrong user or password")
                return refuse("401 Unauthorized",
                              [("WWW-Authenticate", 'Basic realm="pgparmon"')])
        return app(environ, respond)

    return guarded


class _Handler(WSGIRequestHandler):
    timeout = 30  # a client that sends nothing holds a thread this long at most
    server_version = "pgparmon"  # its error pages: not the Python version
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # no access log: a request line may carry anything


def _family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


class MetricsServer(ThreadingMixIn, WSGIServer):
    """/metrics over HTTP or HTTPS. The TLS handshake runs in the request's
    own thread (a client that stalls it holds only that one), with the
    configuration in force when the connection was accepted."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, app: Callable[..., Any], web: Web | None,
                 log: Callable[[str], None]) -> None:
        self.address_family, host = _family(host, port)
        self.web = web
        self.quiet = Quiet(log)
        super().__init__((host, port), _Handler)
        inner = guard(app, web) if web is not None else app

        def named(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            def respond(status: str, headers: list[tuple[str, str]], *a: Any) -> Any:
                return start_response(status, [*headers, ("Server", "pgparmon")], *a)
            return inner(environ, respond)  # wsgiref would say its Python version

        self.set_app(named)

    def server_bind(self) -> None:
        # HTTPServer.server_bind asks the resolver for this host's name (slow,
        # and nothing here uses it)
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        if self.web is not None:
            cfg, ctx, _ = self.web.current()
            if ctx is not None:
                sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                sock.pgparmon_tls = cfg.tls  # the settings it was accepted under
        return sock, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(_Handler.timeout)
            try:
                request.do_handshake()
            except (OSError, ValueError) as exc:  # ssl.SSLError, a reset, a timeout
                self.quiet.say("tls", f"TLS handshake with {client_address[0]} failed: "
                               f"{_ssl_reason(exc)}")
                return
            tls: TLSSettings | None = getattr(request, "pgparmon_tls", None)
            if tls is not None and tls.allowed_sans is not None and \
                    not sans_allowed(request.getpeercert(), tls.allowed_sans):
                self.quiet.say("sans", f"refused {client_address[0]}: its certificate names "
                               "none of client_allowed_sans")
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        self.quiet.say("http", redact_text(f"a request from {client_address[0]} failed: "
                                           f"{type(exc).__name__}: {exc}"))


def serve(host: str, port: int, app: Callable[..., Any], web: Web | None,
          log: Callable[[str], None]) -> MetricsServer:
    """Listen (OSError when it cannot) and serve in a daemon thread."""
    srv = MetricsServer(host, port, app, web, log)
    threading.Thread(target=srv.serve_forever, name="pgparmon-http", daemon=True).start()
    return srv
