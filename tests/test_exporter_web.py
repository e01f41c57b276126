"""`pgparmon exporter --web-config`: the exporter toolkit's web configuration
(TLS, client certificates, basic auth with bcrypt hashes, headers, rate
limit) on real sockets with real certificates made by openssl, and the
files pgparmon writes created private. The real Prometheus scraping the
exporter over TLS is in test_exporter.py."""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import shutil
import ssl
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PASSWORD
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app
from support import Pki

from pgparmon.exporter import web as webmod
from pgparmon.exporter.web import Web, WebConfigError, parse
from pgparmon.private import make_private_dirs, open_private, open_to_others



def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def _tls_yaml(pki: Pki, extra: str = "") -> str:
    return (f"tls_server_config:\n  cert_file: {pki.server[0]}\n  key_file: {pki.server[1]}\n"
            + extra)


class Served:
    """The exporter's HTTP server (web.serve) with a real prometheus-client
    app, and what it logged."""

    def __init__(self, cfg: Path) -> None:
        self.lines: list[str] = []
        self.web = Web(str(cfg), self.lines.append)
        reg = CollectorRegistry()
        Gauge("pgparmon_test_up", "a test series", registry=reg).set(1)
        self.srv = webmod.serve("127.0.0.1", 0, make_wsgi_app(reg), self.web, self.lines.append)
        self.port = int(self.srv.server_address[1])

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@contextlib.contextmanager
def served(cfg: Path) -> Iterator[Served]:
    s = Served(cfg)
    try:
        yield s
    finally:
        s.close()


def client_ctx(ca: str, cert: tuple[str, str] | None = None,
               max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


def get(port: int, ctx: ssl.SSLContext | None, user: str | None = None,
        password: str = PASSWORD) -> tuple[int, dict[str, str], str]:
    conn: http.client.HTTPConnection
    if ctx is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode()
    try:
        conn.request("GET", "/metrics", headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode()
    finally:
        conn.close()


def refused(port: int, ctx: ssl.SSLContext) -> str:
    """The handshake (or the first read after it: TLS 1.3 sends the server's
    verdict on a client certificate after the client's Finished) fails."""
    try:
        status, _, _ = get(port, ctx)
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected) as exc:
        return type(exc).__name__ + ": " + str(exc)
    raise AssertionError(f"the request went through ({status})")


# ---- TLS and basic auth on real sockets -------------------------------------------------

def test_tls_and_basic_auth(pki: Pki, pw_hash: str, tmp_path: Path) -> None:
    cfg = _write(tmp_path / "web.yml", _tls_yaml(pki) + f"basic_auth_users:\n  prom: {pw_hash}\n"
                 "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n")
    with served(cfg) as s:
        ok = client_ctx(pki.ca[0])
        status, headers, body = get(s.port, ok, "prom")
        assert status == 200 and "pgparmon_test_up 1.0" in body
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "Python" not in headers.get("Server", "")
        status, headers, _ = get(s.port, ok)  # no credentials
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert get(s.port, ok, "prom", "wrong")[0] == 401
        assert get(s.port, ok, "nobody")[0] == 401  # an unknown user, the right password
        # a CA that did not sign the server's certificate: the client refuses it
        with pytest.raises(ssl.SSLCertVerificationError):
            get(s.port, client_ctx(pki.wrong_ca[0]), "prom")
        # plain HTTP to the TLS port gets nothing
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            get(s.port, None, "prom")
        # bcrypt ran for the first good password and each wrong one, never again after
        runs = s.web.auth.checks
        for _ in range(5):
            assert get(s.port, ok, "prom")[0] == 200
        assert s.web.auth.checks == runs
    said = "\n".join(s.lines)
    assert "wrong user or password" in said
    assert PASSWORD not in said and "wrong" not in said.replace("wrong user", "")
    assert pw_hash not in said


def test_client_certificates(pki: Pki, tmp_path: Path) -> None:
    cfg = _write(tmp_path / "web.yml", _tls_yaml(
        pki, f"  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {pki.client_ca[0]}\n"))
    with served(cfg) as s:
        assert get(s.port, client_ctx(pki.ca[0], pki.client))[0] == 200
        refused(s.port, client_ctx(pki.ca[0]))  # no certificate
        refused(s.port, client_ctx(pki.ca[0], pki.stranger))  # signed by another CA
    assert any("TLS handshake with 127.0.0.1 failed" in ln for ln in s.lines), s.lines

    cfg = _write(tmp_path / "web.yml", _tls_yaml(
        pki, f"  client_auth_type: VerifyClientCertIfGiven\n"
        f"  client_ca_file: {pki.client_ca[0]}\n"))
    with served(cfg) as s:
        assert get(s.port, client_ctx(pki.ca[0]))[0] == 200  # none given: fine
        assert get(s.port, client_ctx(pki.ca[0], pki.client))[0] == 200
        refused(s.port, client_ctx(pki.ca[0], pki.stranger))  # given and bad: refused

    for sans, ok in (("[prometheus, other]", True), ("[someone-else, 10.0.0.1]", False)):
        cfg = _write(tmp_path / "web.yml", _tls_yaml(
            pki, f"  client_auth_type: RequireAndVerifyClientCert\n"
            f"  client_ca_file: {pki.client_ca[0]}\n  client_allowed_sans: {sans}\n"))
        with served(cfg) as s:
            if ok:
                assert get(s.port, client_ctx(pki.ca[0], pki.client))[0] == 200
            else:
                refused(s.port, client_ctx(pki.ca[0], pki.client))
                assert any("client_allowed_sans" in ln for ln in s.lines)


def test_tls_versions_inline_pem_and_request_client_cert(pki: Pki, tmp_path: Path) -> None:
    indent = "\n".join("    " + ln for ln in Path(pki.server[0]).read_text().splitlines())
    kindent = "\n".join("    " + ln for ln in Path(pki.server[1]).read_text().splitlines())
    cfg = _write(tmp_path / "web.yml",
                 f"tls_server_config:\n  cert: |\n{indent}\n  key: |\n{kindent}\n"
                 "  min_version: TLS13\n  client_auth_type: RequestClientCert\n")
    with served(cfg) as s:
        assert get(s.port, client_ctx(pki.ca[0]))[0] == 200
        assert get(s.port, client_ctx(pki.ca[0], pki.stranger))[0] == 200  # never checked
        refused(s.port, client_ctx(pki.ca[0], max_version=ssl.TLSVersion.TLSv1_2))


def test_rate_limit_and_plain_http_with_auth(pki: Pki, pw_hash: str, tmp_path: Path) -> None:
    cfg = _write(tmp_path / "web.yml", f"basic_auth_users:\n  prom: {pw_hash}\n"
                 "rate_limit:\n  interval: 1h\n  burst: 2\n")
    with served(cfg) as s:
        assert [get(s.port, None, "prom")[0] for _ in range(3)] == [200, 200, 429]


def test_certificates_and_users_are_read_again_when_they_change(
        pki: Pki, pw_hash: str, tmp_path: Path) -> None:
    crt, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(pki.server[0], crt)
    shutil.copy(pki.server[1], key)
    cfg = _write(tmp_path / "web.yml", "tls_server_config:\n  cert_file: server.crt\n"
                 "  key_file: server.key\n")  # relative: to the file's directory
    with served(cfg) as s:
        assert get(s.port, client_ctx(pki.ca[0]))[0] == 200
        # a renewed certificate, from another CA: served on the next connection
        other = pki.leaf("renewed", pki.wrong_ca, "IP:127.0.0.1", "serverAuth")
        shutil.copy(other[1], tmp_path / "new.key")
        shutil.copy(other[0], tmp_path / "new.crt")
        os.replace(tmp_path / "new.key", key)
        os.replace(tmp_path / "new.crt", crt)
        assert get(s.port, client_ctx(pki.wrong_ca[0]))[0] == 200
        with pytest.raises(ssl.SSLCertVerificationError):
            get(s.port, client_ctx(pki.ca[0]))
        # users added: they apply at once
        _write(cfg, cfg.read_text() + f"basic_auth_users:\n  prom: {pw_hash}\n")
        assert get(s.port, client_ctx(pki.wrong_ca[0]))[0] == 401
        # a file that no longer loads: said once, the previous one stays in force
        _write(cfg, cfg.read_text() + "surprise: 1\n")
        assert get(s.port, client_ctx(pki.wrong_ca[0]), "prom")[0] == 200
        assert get(s.port, client_ctx(pki.wrong_ca[0]))[0] == 401
    said = [ln for ln in s.lines if "surprise" in ln]
    assert len(said) == 1 and "previous configuration stays" in said[0], s.lines


# ---- the file ---------------------------------------------------------------------------

def test_a_toolkit_file_parses(pki: Pki, pw_hash: str, tmp_path: Path) -> None:
    cfg = parse(str(_write(tmp_path / "web.yml", f"""\
tls_server_config:
  cert_file: "server.crt"
  key_file: "server.key"
  client_auth_type: "VerifyClientCertIfGiven"
  client_ca_file: ca.crt
  client_allowed_sans: ["one", "127.0.0.1"]
  cipher_suites:
  - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256
  - TLS_AES_128_GCM_SHA256
  min_version: TLS12
  max_version: TLS12
  prefer_server_cipher_suites: false
http_server_config:
  http2: false
  headers:
    X-Frame-Options: sameorigin
    Content-Security-Policy: "default-src 'none'"
    X-XSS-Protection: ""
basic_auth_users:
  alice: {pw_hash}
  1234: {pw_hash}
rate_limit:
  interval: 1m30s
  burst: 20
""")))
    assert cfg.tls is not None and cfg.tls.cert_file == str(tmp_path / "server.crt")
    assert cfg.tls.client_ca_file == str(tmp_path / "ca.crt")
    assert cfg.tls.ciphers == ("ECDHE-RSA-AES128-GCM-SHA256",)
    assert cfg.tls.max_version == ssl.TLSVersion.TLSv1_2 and not cfg.tls.prefer_server_ciphers
    assert set(cfg.users) == {"alice", "1234"}
    assert dict(cfg.headers) == {"X-Frame-Options": "sameorigin",
                                 "Content-Security-Policy": "default-src 'none'"}
    assert cfg.rate_interval_s == 90 and cfg.rate_burst == 20
    assert parse(str(_write(tmp_path / "empty.yml", ""))).tls is None  # as the toolkit: no TLS


def test_the_documented_example_parses(tmp_path: Path) -> None:
    from test_exporter import ROOT, _yaml_blocks

    example = _yaml_blocks(ROOT / "docs" / "metrics.md", "TLS and basic auth")[0]
    d = tmp_path / "etc"
    d.mkdir()
    cfg = parse(str(_write(d / "web.yml", example)))
    assert cfg.tls is not None and cfg.tls.cert_file == str(d / "tls" / "db1.crt")
    assert cfg.tls.key_file == str(d / "tls" / "db1.key") and list(cfg.users) == ["prometheus"]


BAD = [
    ("tls_server_config: {cert_file: a, key_file: b}\nlisten: 1\n", "unknown setting 'listen'"),
    ("tls_server_config: {cert_file: a, key_file: b, certfile: c}\n",
     "unknown setting 'certfile'"),
    ("tls_server_config: {cert_file: a}\n", "key_file is missing"),
    ("tls_server_config: [a]\n", "must be a mapping"),
    ("tls_server_config:\n  cert_file: a\n key_file: b\n", "not valid YAML (line 3"),
    ("basic_auth_users:\n  prom: hunter2-the-secret\n", "not a bcrypt hash"),
    ("basic_auth_users:\n  prom: HASH\n  prom: HASH\n", "'prom' is given twice"),
    ("basic_auth_users: [prom]\n", "mapping of user"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAnyClientCert}\n",
     "RequireAndVerifyClientCert"),
    ("tls_server_config: {cert_file: a, key_file: b, client_auth_type: Always}\n",
     "'Always' is not one of"),
    ("tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}\n",
     "client_auth_type is NoClientCert"),
    ("tls_server_config: {cert_file: a, key_file: b, client_allowed_sans: [x]}\n",
     "needs client_auth_type"),
    ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS111}\n",
     "'TLS111' is not one of"),
    ("tls_server_config: {cert_file: a, key_file: b, min_version: TLS13, max_version: TLS12}\n",
     "min_version is above max_version"),
    ("tls_server_config: {cert_file: a, key_file: b, cipher_suites: [TLS_INVENTED]}\n",
     "'TLS_INVENTED' is not a cipher suite"),
    ("tls_server_config: {cert_file: a, key_file: b, curve_preferences: [X25519]}\n",
     "curve_preferences is not supported"),
    ("tls_server_config: {cert_file: a, cert: b, key_file: c}\n", "not both"),
    ("http_server_config: {headers: {X-Powered-By: me}}\n", "cannot be set"),
    ("http_server_config: {headers: {X-Frame-Options: allow}}\n", "deny, sameorigin"),
    ("http_server_config: {http2: maybe}\n", "true or false"),
    ("rate_limit: {interval: 1s, burst: 0}\n", "at least 1"),
    ("rate_limit: {interval: soon, burst: 1}\n", "duration"),
    ("- just\n- a list\n", "must be a mapping"),
]


@pytest.mark.parametrize(("text", "needle"), BAD)
def test_bad_files_get_one_line(text: str, needle: str, pw_hash: str, tmp_path: Path) -> None:
    with pytest.raises(WebConfigError) as e:
        parse(str(_write(tmp_path / "web.yml", text.replace("HASH", pw_hash))))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg, msg
    assert "hunter2" not in msg and pw_hash not in msg


def test_bad_web_config_at_start_is_one_line_and_exit_2(pki: Pki, tmp_path: Path) -> None:
    from test_exporter import _exporter_argv, _one_line_error

    cases = {
        "secret.yml": ("basic_auth_users:\n  prom: hunter2-the-secret\n", "not a bcrypt hash"),
        "nocert.yml": (f"tls_server_config:\n  cert_file: {tmp_path}/none.crt\n"
                       f"  key_file: {pki.server[1]}\n", "No such file"),
        "mismatch.yml": (_tls_yaml(pki).replace(pki.server[1], pki.client[1]), "mismatch"),
    }
    enc = tmp_path / "enc.key"  # an encrypted key: refused, never a passphrase prompt
    subprocess.run([pki.openssl, "ec", "-in", pki.server[1], "-aes256", "-passout",
                    "pass:s3cret", "-out", str(enc)], check=True, capture_output=True)
    cases["enc.yml"] = (_tls_yaml(pki).replace(pki.server[1], str(enc)), "encrypted")
    for name, (text, needle) in cases.items():
        cfg = _write(tmp_path / name, text)
        line = _one_line_error(_exporter_argv("--web-config", str(cfg)), 2)
        assert f"--web-config {cfg}" in line and needle in line, line
        assert "hunter2" not in line and "s3cret" not in line
    line = _one_line_error(_exporter_argv("--web-config", str(tmp_path / "missing.yml")), 2)
    assert "cannot read it" in line


def test_the_shipped_example_needs_a_real_hash(pki: Pki, pw_hash: str, tmp_path: Path) -> None:
    """contrib/systemd/web.yml refuses to start until its placeholder is a
    bcrypt hash; then it is a valid file."""
    example = Path(__file__).resolve().parent.parent / "contrib" / "systemd" / "web.yml"
    text = example.read_text()
    with pytest.raises(WebConfigError, match="not a bcrypt hash"):
        parse(str(_write(tmp_path / "web.yml", text)))
    placeholder = next(ln.split(":", 1)[1].strip() for ln in text.splitlines()
                       if ln.startswith("  prometheus:"))
    cfg = parse(str(_write(tmp_path / "web.yml", text.replace(placeholder, pw_hash))))
    assert cfg.tls is not None and cfg.users and cfg.tls.key_file


# ---- private files ----------------------------------------------------------------------

@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Any) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_private_files_and_directories_whatever_the_umask(tmp_path: Path) -> None:
    for mask in (0, 0o022, 0o277):
        d = tmp_path / f"u{mask:o}"
        with umask(mask):
            made = make_private_dirs(str(d / "a" / "b"))
            with open_private(str(d / "a" / "b" / "rec")) as f:
                f.write(b"x")
        assert made == [str(d), str(d / "a"), str(d / "a" / "b")]
        assert {_mode(p) for p in made} == {0o700}
        assert _mode(d / "a" / "b" / "rec") == 0o600
    old = tmp_path / "old"  # an existing directory and file
    old.mkdir(mode=0o755)
    old.chmod(0o755)
    (old / "f.html").write_text("earlier")
    (old / "f.html").chmod(0o644)
    assert make_private_dirs(str(old)) == [] and _mode(old) == 0o755  # left as it is
    assert open_to_others(str(old)) == 0o755
    with open_private(str(old / "f.html"), text=True) as f:
        f.write("now")
    assert _mode(old / "f.html") == 0o600 and (old / "f.html").read_text() == "now"
    with pytest.raises(OSError):
        make_private_dirs(str(old / "f.html"))  # a file where the directory should be

