"""Who may ask the exporter, and how often: basic authentication against
bcrypt hashes (PyCA's bcrypt, one check at a time; a user's last good
password remembered as a keyed digest, never the password, compared in
constant time, so that a scrape every 15 s costs one HMAC, not a bcrypt run;
an unknown user costs a bcrypt run of the same cost: no user enumeration by
time) and the rate limit."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import threading
import time


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

