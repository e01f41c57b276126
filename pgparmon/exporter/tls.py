"""TLS for the exporter's /metrics: the server's SSLContext from the
--web-config settings (Python's ssl, OpenSSL; an inline key held in memory,
never on disk) and the check of a client certificate's names."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import ssl
from collections.abc import Iterable
from typing import Any

from .webconfig import CLIENT_AUTH, VERIFYING, TLSSettings, WebConfigError


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


def ssl_reason(exc: BaseException) -> str:
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
                             f"{ssl_reason(exc)}") from None
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
                                 f"{ssl_reason(exc)}") from None
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
            raise WebConfigError(f"cannot load the client CA {src}: {ssl_reason(exc)}") \
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

