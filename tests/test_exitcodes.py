"""docs/exit-codes.md is the user's copy of exitcodes.ExitCode: the two
must list the same codes."""

from __future__ import annotations

import re
from pathlib import Path

from pgparmon.exitcodes import ExitCode, for_signal

DOC = Path(__file__).resolve().parent.parent / "docs" / "exit-codes.md"


def test_every_exit_code_is_documented_and_every_documented_code_exists() -> None:
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", DOC.read_text(), re.MULTILINE)}
    assert documented == {int(c) for c in ExitCode}


def test_signal_codes_follow_the_shell() -> None:
    import signal

    assert for_signal(signal.SIGHUP) == ExitCode.SIGHUP
    assert for_signal(signal.SIGTERM) == ExitCode.SIGTERM
    assert for_signal(signal.SIGINT) == ExitCode.INTERRUPTED
