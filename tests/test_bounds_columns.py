"""graph.bounds' column-wise checks: the per-rank sums are exact whether summed whole (no partial sum
can overflow int64) or split in two parts (values near 2**53, where the whole sum could overflow)."""

from __future__ import annotations

import numpy as np
import pytest

from xsim_trace.graph.bounds import MAX_TOTAL_NS, _per_rank_sums


def _exact(values: np.ndarray, rank_ptr: np.ndarray) -> list[int]:
    vals = values.tolist()
    return [sum(vals[a:b]) for a, b in zip(rank_ptr[:-1].tolist(), rank_ptr[1:].tolist())]


@pytest.mark.parametrize("lo, hi", [(0, 10**6), (0, 1 << 53), (-(1 << 40), 1 << 40), (0, 1)])
def test_per_rank_sums_are_exact(lo, hi):
    values = np.random.default_rng(7).integers(lo, hi, 4000, dtype=np.int64)
    rank_ptr = np.array([0, 1, 1000, 1000, 2500, 4000])
    got = _per_rank_sums(values, rank_ptr)
    assert got == _exact(values, rank_ptr) and all(type(x) is int for x in got)


def test_a_sum_past_int64_is_still_seen():
    values = np.full(2048, 1 << 53, np.int64)  # 2**64 in all: the whole cumsum would wrap
    got = _per_rank_sums(values, np.array([0, 2048]))
    assert got == [1 << 64] and got[0] > MAX_TOTAL_NS
