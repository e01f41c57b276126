"""`pgparmon exporter --web-config FILE`: /metrics over HTTP or HTTPS, behind
TLS, basic authentication and a rate limit configured as every exporter
built on Prometheus' exporter toolkit is (the file: webconfig.py; the
SSLContext: tls.py; the password checks and the rate limit: auth.py).

The file and the certificate, key and CA files it names are checked on each
new connection (a stat each): when one changed they are read again, so a
renewed certificate is served without a restart; a file that no longer loads
is said once on stderr and the previous configuration stays in force.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import stat
import sys
import threading
import time
from collections.abc import Callable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from ..redact import redact_text
from .auth import BasicAuth, RateLimit, basic_credentials
from .tls import sans_allowed, ssl_reason, tls_context
from .webconfig import VERIFYING, TLSSettings, WebConfig, WebConfigError, parse

__all__ = ["MetricsServer", "Web", "WebConfig", "WebConfigError", "describe", "guard",
           "parse", "serve"]


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
                               f"{ssl_reason(exc)}")
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

