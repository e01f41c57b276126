"""The command a wrapper runs: `su postgres -c 'pg_dump ...'`, `sudo -u
postgres pg_restore ...`, `runuser`, `env VAR=x ...`, `nice`, `ionice`,
`timeout`, `nohup`, `setsid`, `taskset`, `chrt`, `stdbuf`, and a shell's
``-c 'simple command'``.  `pgparmon run` takes the job's kind, its options
and its server from the command inside, not from the first word.

`unwrap(argv)` never raises: what it cannot read (a shell string with pipes,
redirections or several commands, an option it does not know that may take a
value) ends the unwrapping there, and the caller sees that command itself;
su's string of more than one command is the shell su runs it with (`sh -c
STRING`), read as a shell's string is (`shell_parts`).
"""

from __future__ import annotations

import os
import shlex

# wrapper -> (its options that take a value, whether it needs a value before
# the command: timeout DURATION, taskset MASK, chrt PRIORITY)
_PLAIN: dict[str, tuple[frozenset[str], int]] = {
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid", "-P", "--pgid",
                          "-u", "--uid"}), 0),
    "timeout": (frozenset({"-k", "--kill-after", "-s", "--signal"}), 1),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "taskset": (frozenset(), 1),
    "chrt": (frozenset(), 1),
    "stdbuf": (frozenset({"-i", "--input", "-o", "--output", "-e", "--error"}), 0),
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "sudo": (frozenset({"-u", "--user", "-g", "--group", "-C", "--close-from", "-D",
                        "--chdir", "-h", "--host", "-p", "--prompt", "-R", "--chroot",
                        "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U",
                        "--other-user"}), 0),
    "runuser": (frozenset({"-u", "--user", "-g", "--group", "-G", "--supp-group",
                           "-s", "--shell", "-w", "--whitelist-environment"}), 0),
}
# a user's shell given a command string: su USER -c STRING, runuser USER -c STRING
_STRING_USERS = frozenset({"su", "runuser"})
_SU_VALUE_OPTIONS = frozenset({"-s", "--shell", "-g", "--group", "-G", "--supp-group",
                               "-w", "--whitelist-environment"})
_SHELLS = frozenset({"sh", "bash", "dash", "ksh", "zsh"})
# what a "simple command" string may not hold: pipes, lists, redirections,
# substitutions, globs that the shell would expand
_SHELL_SYNTAX = set("|&;<>()$`*?[]{}\n")
_MAX_DEPTH = 8


def program_name(argv: list[str]) -> str:
    return os.path.basename(argv[0]) if argv else ""


def unwrap(argv: list[str]) -> list[str]:
    """The innermost command argv runs (argv itself when it wraps nothing)."""
    cur = list(argv)
    for _ in range(_MAX_DEPTH):
        inner = _inner(cur)
        if inner is None or not inner:
            return cur
        cur = inner
    return cur


def wrapped(argv: list[str]) -> bool:
    """Whether argv runs another command (su, sudo, env, nice, a shell -c, ...)."""
    return unwrap(argv) != list(argv)


def _inner(argv: list[str]) -> list[str] | None:
    name = program_name(argv)
    opts = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    # runuser -u USER [--] CMD runs CMD; su / runuser USER -c STRING runs STRING
    user_form = name == "runuser" and any(a in ("-u", "--user") or a.startswith("--user=")
                                          for a in opts)
    if name in _STRING_USERS and not user_form and _has_command_string(opts):
        return _su(opts)
    if name in _SHELLS:
        return _shell(argv[1:])
    spec = _PLAIN.get(name)
    if spec is None:
        return None
    takes_value, positional = spec
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if name == "env" and "=" in a and not a.startswith("-"):
            i += 1  # VAR=value
            continue
        if not a.startswith("-") or a == "-":
            break
        if name == "nice" and a[1:].isdigit():  # nice -5 CMD (old syntax)
            i += 1
            continue
        opt = a.split("=", 1)[0]
        if name == "env" and (opt in ("-S", "--split-string") or a.startswith("-S")):
            return None  # a string to split: not followed
        if a.startswith("--"):
            i += 2 if opt in takes_value and "=" not in a else 1
            continue
        i += _short_bundle(a, takes_value)
    i += positional
    return argv[i:] if i < len(argv) else None


def _short_bundle(a: str, takes_value: frozenset[str]) -> int:
    """How many words a bundle of short options takes (getopt): -xyz is
    three flags, unless a letter takes a value: the rest of the bundle is
    that value (-uroot), or the next word when the letter ends it (-iu root)."""
    for j, letter in enumerate(a[1:], start=1):
        if f"-{letter}" in takes_value:
            return 2 if j == len(a) - 1 else 1
    return 1


def _has_command_string(args: list[str]) -> bool:
    return any(a in ("-c", "--command") or a.startswith("--command=") for a in args)


def _su(args: list[str]) -> list[str] | None:
    """su [options] [-] [USER] -c STRING (options and user in any order):
    the command, or where the string is more than one, the shell that
    runs it (`sh -c STRING`: its commands are read as a shell's are)."""
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-c", "--command"):
            return _simple_or_shell(args[i + 1]) if i + 1 < len(args) else None
        if a.startswith("--command="):
            return _simple_or_shell(a.split("=", 1)[1])
        if a in _SU_VALUE_OPTIONS:
            i += 2
            continue
        i += 1
    return None


def _simple_or_shell(text: str) -> list[str]:
    return _simple(text) or ["sh", "-c", text]


def _shell(args: list[str]) -> list[str] | None:
    """sh -c STRING (with -e, -x and the like before it)."""
    for i, a in enumerate(args):
        if a == "-c":
            return _simple(args[i + 1]) if i + 1 < len(args) else None
        if not a.startswith("-"):
            return None  # a script file: not a wrapper
    return None


def _simple(text: str) -> list[str] | None:
    """A shell string that is one simple command (an `exec` before it is
    fine), split as the shell would; None for anything else."""
    if any(c in _SHELL_SYNTAX for c in text):
        return None
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    return _bare(words) or None


def _bare(words: list[str]) -> list[str]:
    """A command's words without an `exec` before it and the VAR=value
    words that set its environment alone (in either order)."""
    if words and words[0] == "exec":
        words = words[1:]
    while words and "=" in words[0] and not words[0].startswith(("-", "/", ".")):
        words = words[1:]
    return words[1:] if words and words[0] == "exec" else words


def shell_parts(argv: list[str]) -> list[tuple[list[str], tuple[str, ...]]] | None:
    """The commands of a shell's `-c` string (sh -c 'A && B; C | D'), each
    split as the shell would, in order (variables and substitutions left
    as written: `"$L/rest.list"` stays a word of its own), each with the
    operators before it since the command before (`&&`, `|`, `&`, `;`...:
    whether it runs after that one or beside it); None when argv is no
    shell given a string, or the string does not split."""
    if program_name(argv) not in _SHELLS:
        return None
    args = argv[1:]
    text = next((args[i + 1] for i, a in enumerate(args) if a == "-c" and i + 1 < len(args)),
                None)
    if text is None:
        return None
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.wordchars += "$"
    out: list[tuple[list[str], list[str]]] = [([], [])]
    try:
        for tok in lex:
            if tok and set(tok) <= set("&|;()\n"):
                out.append(([], [tok]))  # an operator ends a command
            else:
                out[-1][0].append(tok)
    except ValueError:
        return None
    parts: list[tuple[list[str], tuple[str, ...]]] = []
    ops: list[str] = []
    for words, before in out:
        ops += before
        bare = _bare(words)
        if bare:
            parts.append((bare, tuple(ops)))
            ops = []
    return parts
