"""Issue 15 ("also found"): breakdown.png's legend says what the terminal table says, and explains host."""

from __future__ import annotations

from xsim_trace.replay.compile import COMM_KINDS
from xsim_trace.report.plot import _label


def test_legend_names_match_the_table_columns():
    assert "other" in COMM_KINDS and _label("other") == "exposed other"
    assert all(_label(k) == f"exposed {k}" for k in COMM_KINDS)
    assert _label("host") == "host (CPU ops, no GPU work)" and _label("compute") == "compute"
