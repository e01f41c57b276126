"""Never show or store a secret.

Everything pgparmon prints or records about client processes (command lines,
environments, error messages) goes through these functions first.  The rule
is "when in doubt, redact": hiding a harmless value is a cosmetic problem,
showing a password is not.

Replacement text is always ``********``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import unquote

MASK = "********"

# libpq only treats ASCII whitespace as a separator (isspace on bytes in the C
# locale); Python's \s would also cut at NBSP or U+2028 inside a password.
_WS = " \t\n\r\f\v"
_NOT_WS_CLASS = r"[^ \t\n\r\f\v]"

_SECRET_WORDS = ("password", "passwd", "secret", "token")
# pgBackRest's secrets (--repo1-cipher-pass, --repo1-s3-key, PGBACKREST_REPO1_S3_KEY,
# --repo1-sftp-private-key-passphrase, ...): given as `--option value` too
_TOOL_SECRET_WORDS = ("cipher-pass", "passphrase", "s3-key", "azure-key", "gcs-key")

_URI_PREFIX_RE = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
# In free text a URI ends at whitespace; inside redact_uri() it does not.
_URI_IN_TEXT_RE = re.compile(r"postgres(?:ql)?://" + _NOT_WS_CLASS + "*", re.IGNORECASE)

# Value grammars.  libpq: 'single quoted' with backslash escapes, or bare up
# to whitespace with backslash escapes.  Shell (env assignments, --opt=val on
# a command line): concatenated 'no-escape' / "escaped" / bare\ words.  An
# unterminated quote runs to the end of the text: over-redaction is safe.
_LIBPQ_VALUE = (
    r"(?:'(?:[^'\\]|\\.)*(?:'|\\?\Z)"
    r"|(?:[^ \t\n\r\f\v\\]|\\.|\\\Z)*)"
)
_SHELL_VALUE = (
    r"(?:'[^']*(?:'|\Z)"
    r"|\"(?:[^\"\\]|\\.)*(?:\"|\\?\Z)"
    r"|[^ \t\n\r\f\v'\"\\]|\\.|\\\Z)*"
)
_KEY_RE = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<key>-{0,2}[A-Za-z0-9_.\-]*?(?:password|passwd|secret|token"
    r"|cipher[-_]pass|passphrase|s3[-_]key|azure[-_]key|gcs[-_]key)"
    r"[A-Za-z0-9_.\-]*)[ \t]*=[ \t]*",
    re.IGNORECASE,
)
_SHELL_VALUE_RE = re.compile(_SHELL_VALUE, re.DOTALL)
_LIBPQ_VALUE_RE = re.compile(_LIBPQ_VALUE, re.DOTALL)
# SQL: CREATE/ALTER ROLE ... [ENCRYPTED] PASSWORD 'literal' (psql -c, logs).
_SQL_PASSWORD_RE = re.compile(
    r"(?P<kw>\bPASSWORD[ \t\n\r]+)"
    r"(?P<lit>[Ee]'(?:[^'\\]|\\.|'')*(?:'|\\?\Z)|'(?:[^']|'')*(?:'|\Z))",
    re.IGNORECASE | re.DOTALL,
)
_ENV_ASSIGN_RE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<val>.*)", re.DOTALL)
_LONG_OPT_RE = re.compile(r"(?P<key>-{1,2}[A-Za-z0-9_.\-]+)=(?P<val>.*)", re.DOTALL)


def is_secret_key(key: str) -> bool:
    """True for option / variable / conninfo names that carry a secret
    (password, sslpassword, PGPASSWORD, --db-password, API_TOKEN, ...)."""
    k = key.lower().replace("_", "-")
    return any(w in k for w in _SECRET_WORDS + _TOOL_SECRET_WORDS)


# ---------------------------------------------------------------- conninfo


def _conninfo_spans(s: str) -> list[tuple[int, int, bool]] | None:
    """(start, end, quoted) of each secret value, following libpq's
    conninfo_parse() exactly; None when s is not a valid conninfo string."""
    spans: list[tuple[int, int, bool]] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in _WS:
            i += 1
        if i >= n:
            return spans
        k0 = i
        while i < n and s[i] != "=" and s[i] not in _WS:
            i += 1
        key = s[k0:i]
        while i < n and s[i] in _WS:
            i += 1
        if i >= n or s[i] != "=" or not key:
            return None
        i += 1
        while i < n and s[i] in _WS:
            i += 1
        m = _LIBPQ_VALUE_RE.match(s, i)
        assert m is not None  # the pattern can match the empty string
        if is_secret_key(key) and m.end() > i:
            spans.append((i, m.end(), s[i] == "'"))
        i = m.end()


def redact_conninfo(s: str) -> str:
    """Mask password, sslpassword (any key ending in password, or naming a
    secret) in a libpq ``key=value`` string, keeping everything else intact.
    A URI is handed to redact_uri(); text that is not a clean conninfo falls
    back to redact_text()."""
    if _URI_PREFIX_RE.match(s.lstrip(_WS)):
        return redact_uri(s)
    spans = _conninfo_spans(s)
    if spans is None:
        return redact_text(s)
    out: list[str] = []
    last = 0
    for start, end, quoted in spans:
        out.append(s[last:start])
        out.append(f"'{MASK}'" if quoted else MASK)
        last = end
    out.append(s[last:])
    return "".join(out)


# --------------------------------------------------------------------- URI


def _userinfo_end(rest: str) -> int:
    """Index of the '@' closing user:password, or -1.  libpq takes the first
    '@' before the first '/'; we take the last '@' before the first '?' or
    the first '/', whichever is later, so that an unencoded '@', '/' or '?'
    in a password is still covered (hiding too much is the safe side)."""
    q = rest.find("?")
    slash = rest.find("/")
    return max(rest.rfind("@", 0, len(rest) if q < 0 else q),
               rest.rfind("@", 0, len(rest) if slash < 0 else slash))


def _mask_userinfo(userinfo: str) -> str:
    user, colon, password = userinfo.partition(":")
    return f"{user}:{MASK}" if colon and password else userinfo


def _redact_query(query: str) -> str:
    """password=...&sslpassword=... -> masked; keys are percent-decoded
    first because libpq decodes them too."""
    parts = query.split("&")
    for idx, part in enumerate(parts):
        key, eq, _val = part.partition("=")
        if eq and is_secret_key(unquote(key)):
            parts[idx] = f"{key}={MASK}"
    return "&".join(parts)


def redact_uri(s: str) -> str:
    """Mask the password of a postgresql:// or postgres:// URI (the userinfo
    part, multi-host URIs included, and password-like query parameters).
    Text that is not such a URI is returned unchanged."""
    m = _URI_PREFIX_RE.match(s)
    if not m:
        return s
    rest = s[m.end():]
    head = ""
    at = _userinfo_end(rest)
    if at >= 0:
        head = _mask_userinfo(rest[:at]) + "@"
        rest = rest[at + 1:]
    hosts_path, q, query = rest.partition("?")
    if q:
        rest = f"{hosts_path}?{_redact_query(query)}"
    return s[: m.end()] + head + rest


# -------------------------------------------------------------- free text


def _is_shell_style(key: str) -> bool:
    """Upper-case names (PGPASSWORD) and --options take shell words; the
    rest are conninfo keys with libpq's quoting."""
    return key.startswith("-") or key.isupper()


def _value_end(s: str, key: str, pos: int) -> int:
    """Where the value of a secret key starting at pos ends."""
    rx = _SHELL_VALUE_RE if _is_shell_style(key) else _LIBPQ_VALUE_RE
    m = rx.match(s, pos)
    return m.end() if m else pos


def _quoted_mask(first: str, quotes: str) -> str:
    """Keep the value's quoting style so the masked text still reads right."""
    return f"{first}{MASK}{first}" if first in quotes else MASK


def _mask_match(s: str, m: re.Match[str]) -> tuple[str, int]:
    """(replacement, end) for a match of one of the three text rules."""
    if m.re is _URI_IN_TEXT_RE:
        return redact_uri(m.group(0)), m.end()
    if m.re is _SQL_PASSWORD_RE:
        return f"{m.group('kw')}'{MASK}'", m.end()
    end = _value_end(s, m.group("key"), m.end())
    if end == m.end():
        return m.group(0), m.end()  # empty value: nothing to hide
    quotes = "'\"" if _is_shell_style(m.group("key")) else "'"
    return s[m.start():m.end()] + _quoted_mask(s[m.end()], quotes), end


def redact_text(s: str) -> str:
    """Mask secrets anywhere in free text (a whole command line, an error
    message, a log line): URIs, conninfo ``password=...``, shell
    ``PGPASSWORD=...`` assignments, ``--password=...`` options and SQL
    ``PASSWORD '...'`` literals."""
    out: list[str] = []
    pos = 0
    rules = (_URI_IN_TEXT_RE, _KEY_RE, _SQL_PASSWORD_RE)
    while True:
        # Left to right, earliest match first: a quoted password that
        # contains "postgres://" is then consumed as the value it is, and a
        # URI's "?password=" query is left to the URI rule.
        found = [m for rx in rules if (m := rx.search(s, pos)) is not None]
        if not found:
            break
        m = min(found, key=lambda x: x.start())
        repl, end = _mask_match(s, m)
        out.append(s[pos:m.start()])
        out.append(repl)
        pos = end  # every rule matches at least one character
    out.append(s[pos:])
    return "".join(out)


def _redact_arg(arg: str) -> str:
    """One argv element.  It was never shell-quoted, so a secret --option or
    VARIABLE= assignment hides everything after its '='.  A final free-text
    pass catches what the structured rules missed (-dpostgresql://...)."""
    return redact_text(_redact_arg_structured(arg))


def _redact_arg_structured(arg: str) -> str:
    if _URI_PREFIX_RE.match(arg):
        return redact_uri(arg)
    m = _LONG_OPT_RE.fullmatch(arg)
    if m:
        key = m.group("key")
        if is_secret_key(key):
            return f"{key}={MASK}"
        return f"{key}={_redact_arg_structured(m.group('val'))}"
    m = _ENV_ASSIGN_RE.fullmatch(arg)
    if m and m.group("key").isupper() and is_secret_key(m.group("key")):
        return f"{m.group('key')}={MASK}"  # PGPASSWORD=...: never a conninfo
    if "=" in arg and _conninfo_spans(arg) is not None:
        return redact_conninfo(arg)
    if m and is_secret_key(m.group("key")):
        return f"{m.group('key')}={MASK}"
    return arg


def redact_argv(argv: Iterable[str]) -> list[str]:
    """Redact each element of a command line.  PostgreSQL clients take no
    password argument (-W/--password only forces a prompt), so the element
    after --password is not a secret and is kept."""
    out: list[str] = []
    prev = ""
    for a in argv:
        # pgBackRest's `--repo1-cipher-pass VALUE`: the value is the next element
        if prev.startswith("--") and "=" not in prev and \
                any(w in prev.lower() for w in _TOOL_SECRET_WORDS):
            out.append(MASK)
        else:
            out.append(_redact_arg(a))
        prev = a
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """PGPASSWORD, PGSSLPASSWORD and any variable whose name contains
    PASSWORD, SECRET or TOKEN -> ********; other values (PGSERVICE, PGHOST,
    DATABASE_URL...) are kept with any embedded secret masked."""
    return {k: (MASK if is_secret_key(k) else redact_text(v)) for k, v in env.items()}
