"""What TLS and basic auth (`pgparmon exporter --web-config`) cost per
scrape: the same exporter (idle, watching a throwaway cluster) scraped N
times back to back over plain HTTP, then over TLS with basic auth (a bcrypt
hash of cost 10, as `htpasswd -nBC 10` makes), then with a wrong password
(every one a bcrypt run, the cost an attacker or a misconfigured Prometheus
puts on the host). For each: the exporter's own CPU per scrape (user +
system, psutil, over all the scrapes) and the median latency, each scrape a
new connection (a TLS handshake each time, as the exporter answers
HTTP/1.0). The certificate is EC P-256, made by openssl.

    .venv/bin/python bench/exporter_web.py [--scrapes 60]
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import psutil
from common import machine, median, pgparmon, start_cluster, write_json

from pgparmon.cluster import free_port

PASSWORD = "bench-password"


def scrape(port: int, ctx: ssl.SSLContext | None, password: str | None) -> tuple[float, int]:
    req = urllib.request.Request(f"{'https' if ctx else 'http'}://127.0.0.1:{port}/metrics",
                                 headers={"Accept": "application/openmetrics-text; "
                                          "version=1.0.0"})
    if password is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"prometheus:{password}".encode()).decode())
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return (time.perf_counter() - t0) * 1000, status


def measure(proc: psutil.Process, port: int, n: int, ctx: ssl.SSLContext | None,
            password: str | None, want: int) -> dict[str, float]:
    lat = []
    cpu0 = sum(proc.cpu_times()[:2])
    for _ in range(n):
        ms, status = scrape(port, ctx, password)
        assert status == want, status
        lat.append(ms)
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    return {"scrapes": n, "cpu_ms_per_scrape": round(cpu / n * 1000, 2),
            "latency_ms_median": round(median(lat), 2),
            "cpu_percent_of_core_at_15s": round(cpu / n / 15 * 100, 4)}


def start(cl: object, port: int, *extra: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.Popen(pgparmon("exporter", "-h", str(cl.sockdir), "-p",  # type: ignore[attr-defined]
                                     str(cl.port), "-U", "postgres", "-d",  # type: ignore[attr-defined]
                                     "postgres", "--listen", f"127.0.0.1:{port}",
                                     "--interval", "1", *extra),
                            env=env, stderr=subprocess.DEVNULL)


def ready(proc: subprocess.Popen[bytes], port: int, ctx: ssl.SSLContext | None,
          password: str | None) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            scrape(port, ctx, password)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the exporter did not start") from None
            time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrapes", type=int, default=60)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" /
                                         "bench" / "exporter_web.json"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgparmon-bench-web-"))
    ossl = shutil.which("openssl") or "openssl"
    subj = ["-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run([ossl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(work / "k.pem"), "-out",
                    str(work / "c.pem"), "-days", "1", *subj], check=True, capture_output=True)
    h = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    (work / "web.yml").write_text(f"tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n"
                                  f"basic_auth_users:\n  prometheus: {h}\n")
    os.chmod(work / "web.yml", 0o600)
    ctx = ssl.create_default_context(cafile=str(work / "c.pem"))
    cl = start_cluster(prefix="pgparmon-bench-")
    results: dict[str, dict[str, float]] = {}
    try:
        for name, extra, c, pw, want in (
                ("plain_http", (), None, None, 200),
                ("tls_basic_auth", ("--web-config", str(work / "web.yml")), ctx, PASSWORD, 200),
                ("tls_wrong_password", ("--web-config", str(work / "web.yml")), ctx, "nope",
                 401)):
            port = free_port()
            exp = start(cl, port, *extra)
            try:
                ready(exp, port, c, pw)
                time.sleep(2)  # past its start-up
                proc = psutil.Process(exp.pid)
                n = a.scrapes if want == 200 else max(5, a.scrapes // 6)
                results[name] = measure(proc, port, n, c, pw, want)
                print(f"{name}: {results[name]}", flush=True)
            finally:
                exp.terminate()
                exp.wait(timeout=30)
    finally:
        cl.stop()
        shutil.rmtree(work, ignore_errors=True)
    write_json(Path(a.out), {"benchmark": "exporter_web", "machine": machine(),
                             "bcrypt_cost": 10, "certificate": "EC P-256, self-signed",
                             "results": results})


if __name__ == "__main__":
    main()
