"""`xsim replay` opens each rank file once: the metadata records (world size, devices) come from the
same bytes the column decoder walks, and neither decoder reads a file a second time."""

from __future__ import annotations

import builtins
import io
import os
from collections import Counter
from pathlib import Path

import pytest

from xsim_trace.cli.main import main

BUNDLED = Path(__file__).resolve().parents[1] / "traces" / "dlrm_v100_8rank"


@pytest.fixture(params=["numba", "numpy"])
def decoder(request, monkeypatch):
    from xsim_trace.io import et_columns

    kernel = None
    if request.param == "numba":
        pytest.importorskip("numba")
        from xsim_trace.io import _et_kernel as kernel
    monkeypatch.setattr(et_columns, "_kernel", lambda _decoder, _size: kernel)
    return request.param


def test_replay_opens_each_rank_file_once(decoder, monkeypatch, tmp_path):
    opened: Counter[str] = Counter()
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file).endswith(".et"):
            opened[os.path.realpath(file)] += 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)
    rc = main(["replay", str(BUNDLED), "--cluster", "v100-dgx1", "--out", str(tmp_path / "r"),
               "--no-plot", "--no-timeline", "--quiet"])
    assert rc == 0
    rank_files = sorted(os.path.realpath(p) for p in BUNDLED.glob("*.et"))
    assert len(rank_files) == 8
    assert {f: opened[f] for f in rank_files} == {f: 1 for f in rank_files}
