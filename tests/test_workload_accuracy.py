"""The accuracy tool on the published SC'21 rows (closed-form path; the CI table is in tools/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REFERENCE = Path(__file__).parents[1].parent / "shared" / "reference"
TOOL = Path(__file__).parents[1] / "tools" / "accuracy_megatron.py"


@pytest.fixture(scope="module")
def tool():
    if not (REFERENCE / "megatron_sc21_a100.csv").is_file():
        pytest.skip(f"reference tables not found at {REFERENCE}")
    spec = importlib.util.spec_from_file_location("accuracy_megatron", TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_sc21_rows_within_ten_percent(tool):
    rows = tool._sc21_rows(REFERENCE / "megatron_sc21_a100.csv")
    assert len(rows) == 6
    for row in rows:
        sim, path = tool.predict(row, tool.CALIBRATION)
        assert path == "estimate"
        assert abs(sim - row.measured_s) / row.measured_s < 0.10, row.name


def test_ci_rows_parse_and_skip_with_reasons(tool):
    skipped = []
    rows = tool._ci_rows(REFERENCE / "megatron_ci_step_times.csv", skipped)
    assert len(rows) > 200
    assert all(r.fw.world_size == 8 for r in rows)
    assert any("T5" in why for _, why in skipped)
    row = next(r for r in rows if r.name == "gpt/gpt3_mcore_tp4_pp1_resume_torch [dev_dgx_a100]")
    assert (row.fw.tp, row.fw.dp, row.fw.microbatches, row.model.vocab) == (4, 2, 4, 50688)
