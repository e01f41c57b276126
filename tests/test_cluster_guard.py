"""The conftest guard: a test not marked `integration` cannot start a
throwaway cluster (so `pytest -m "not integration"` starts none)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgparmon.cluster import Cluster


def test_an_unmarked_test_cannot_start_a_cluster(tmp_path: Path) -> None:
    cl = Cluster(bindir=Path("/nonexistent"), base=tmp_path / "c", port=1)
    with pytest.raises(pytest.fail.Exception, match="not marked @pytest.mark.integration"):
        cl.init()
    with pytest.raises(pytest.fail.Exception, match="not marked @pytest.mark.integration"):
        cl.start()
    assert not (tmp_path / "c").exists()
