"""Shared fixtures: where the real third-party traces live, and small graph builders."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_TRACES = SHARED / "traces"
CHAKRA_ET = SHARED_TRACES / "chakra_et"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/traces; skips the test (with the reason) when shared/ is absent."""
    p = SHARED_TRACES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared trace {p} not present (tests read real traces from ../shared/traces)")
    return p


@pytest.fixture
def chakra_et_dir() -> Path:
    return shared_path("chakra_et")
