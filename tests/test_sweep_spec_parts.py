"""The parts of sweep.spec.spec_from_mapping: grid points, explicit runs, per-run limits, and the
parameters that vary (first-seen order)."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.sweep.spec import _explicit_combos, _grid_combos, _runs, _varying, spec_from_mapping


def test_grid_points_are_the_product_over_the_base():
    combos = _grid_combos({"a": [1, 2], "b": 3}, {"a": 0, "c": "x"}, "s.yaml")
    assert combos == [{"a": 1, "c": "x", "b": 3}, {"a": 2, "c": "x", "b": 3}]
    with pytest.raises(ConfigError, match="grid.b"):
        _grid_combos({"a": [1], "b": []}, {}, "s.yaml")


def test_explicit_runs_override_the_base():
    assert _explicit_combos([{"a": 5}, {}], {"a": 1, "b": 2}, None) == [{"a": 5, "b": 2}, {"a": 1, "b": 2}]
    with pytest.raises(ConfigError, match=r"runs\[1\]"):
        _explicit_combos([{}, 3], {}, None)


def test_runs_take_their_limits_out_and_drop_repeats():
    combos = [{"a": 1, "time_limit_s": 5}, {"a": 1, "time_limit_s": 5}, {"a": 2}]
    runs = _runs(combos, "network", {"memory_mb": 100}, None, None)
    assert [r.params for r in runs] == [{"a": 1}, {"a": 2}]
    assert (runs[0].limits.time_s, runs[0].limits.memory_mb, runs[1].limits.time_s) == (5.0, 100, None)
    assert combos[0] == {"a": 1}  # popped


def test_varying_names_in_first_seen_order():
    assert _varying([{"z": 1, "b": [1]}, {"z": 1, "b": [2], "a": 3}]) == ("b", "a")  # a: absent vs 3
    assert _varying([{"x": {"k": 1}}, {"x": {"k": 1}}]) == ()


def test_a_large_grid_names_its_two_axes():
    spec = spec_from_mapping({"runner": "network", "base": {"case": "ring", "size_bytes": 1024},
                              "grid": {"ranks": list(range(2, 102)), "bw_GBps": list(range(1, 101))}})
    assert len(spec.runs) == 10_000 and spec.varying == ("ranks", "bw_GBps")
