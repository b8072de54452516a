"""The bundled sample (traces/dlrm_v100_8rank) is what the converter makes of the shared capture."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from xsim_trace.graph.checks import check_rank_set
from xsim_trace.io import read_rank_set, write_rank_set

sys.path.insert(0, str(Path(__file__).parent))
from convert_helpers import dlrm_conversion  # noqa: E402

TRACES = Path(__file__).resolve().parents[1] / "traces"


def test_manifest_hashes_match_files():
    manifest = json.loads((TRACES / "MANIFEST.json").read_text())
    sample = next(s for s in manifest["samples"] if s["name"] == "dlrm_v100_8rank")
    assert sample["license"] == "MIT" and (TRACES / sample["license_file"]).exists()
    assert len(sample["files"]) == 10  # 8 ranks, comm groups, LICENSE
    for f in sample["files"]:
        data = (TRACES / f["path"]).read_bytes()
        assert len(data) == f["bytes"] and hashlib.sha256(data).hexdigest() == f["sha256"], f["path"]
    assert sum(f["bytes"] for f in sample["files"]) < 2 << 20


def test_sample_is_the_current_conversion(tmp_path):
    conv = dlrm_conversion()
    write_rank_set(tmp_path / "dlrm", conv.traces, conv.comm_groups)
    for rank in range(8):
        assert (tmp_path / f"dlrm.{rank}.et").read_bytes() == (TRACES / "dlrm_v100_8rank" / f"dlrm.{rank}.et").read_bytes()
    rs = read_rank_set(TRACES / "dlrm_v100_8rank" / "dlrm")
    assert check_rank_set(rs.traces, rs.comm_groups) == []
