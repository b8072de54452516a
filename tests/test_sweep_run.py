"""Running sweeps: process pool, resume from results.jsonl, failures as records, summary, CLI,
the built-in runners against hand-computed numbers, and (slow) 54 plans on a local Ray."""

from __future__ import annotations

import json

import pytest

from xsim_trace.cli.main import main
from xsim_trace.network.ns3_backend import ns3_available, ns3_unusable_reason
from xsim_trace.sweep.backends import available_backends
from xsim_trace.sweep.execute import run_sweep
from xsim_trace.sweep.results import read_results
from xsim_trace.sweep.runners import execute_run, pipeline_runner
from xsim_trace.sweep.spec import spec_from_mapping
from xsim_trace.sweep.summary import ranked, summary_table

from sweep_helpers import TOY, write_spec

GRID = {"runner": TOY, "grid": {"a": [3, 1, 2], "b": [20, 10]}}  # iteration_ns = 1000 a + b


def lines(path):
    return path.read_text().splitlines()


def test_pool_sweep_writes_one_record_per_run(tmp_path):
    spec = spec_from_mapping(GRID)
    out = run_sweep(spec, tmp_path, jobs=2)
    assert (out.ran, out.skipped) == (6, 0)
    recs = [json.loads(x) for x in lines(tmp_path / "results.jsonl")]
    assert sorted(r["key"] for r in recs) == sorted(r.key for r in spec.runs)
    assert all(r["status"] == "ok" for r in recs)
    by_key = {r["key"]: r for r in recs}
    for run in spec.runs:
        p = run.params
        assert by_key[run.key]["result"] == {"iteration_ns": 1000 * p["a"] + p["b"], "a_times_b": p["a"] * p["b"]}
    assert [r["result"]["iteration_ns"] for r in ranked(out.records, "iteration_ns")] == [
        1010, 1020, 2010, 2020, 3010, 3020]
    table = summary_table(out.records, "iteration_ns", spec.varying, 3).splitlines()
    assert table[0].split() == ["#", "key", "a", "b", "iteration_ns"]
    assert [row.split()[2:] for row in table[1:]] == [["1", "10", "1010"], ["1", "20", "1020"], ["2", "10", "2010"]]


def test_restart_skips_finished_runs_and_survives_a_torn_line(tmp_path):
    spec = spec_from_mapping(GRID)
    run_sweep(spec, tmp_path, jobs=1)
    path = tmp_path / "results.jsonl"
    kept = lines(path)[:2]
    path.write_text("\n".join(kept) + "\n" + '{"key": "abc", "sta')  # killed mid-write
    assert len(read_results(path)) == 2
    seen = []
    out = run_sweep(spec, tmp_path, jobs=2, on_record=seen.append)
    assert (out.ran, out.skipped) == (4, 2)
    assert len(seen) == 4 and not {r["key"] for r in seen} & {json.loads(k)["key"] for k in kept}
    assert len(lines(path)) == 6  # torn tail cut off, four appended
    assert all(json.loads(x)["status"] == "ok" for x in lines(path))
    again = run_sweep(spec, tmp_path, jobs=2)
    assert (again.ran, again.skipped) == (0, 6)
    assert [r["result"] for r in again.records] == [r["result"] for r in out.records]


def test_failures_are_records_and_retried_on_request(tmp_path):
    spec = spec_from_mapping({"runner": TOY, "base": {"b": 0}, "grid": {"a": [1, 2], "fail": [False, True]}})
    out = run_sweep(spec, tmp_path, jobs=1)
    assert len(out.failed) == 2
    assert all(r["error"] == "field fail: asked to fail" for r in out.failed)
    assert run_sweep(spec, tmp_path, jobs=1).ran == 0
    assert run_sweep(spec, tmp_path, jobs=1, retry_errors=True).ran == 2
    bad = execute_run({"key": "k", "runner": "no_such_module:f", "params": {}})
    assert bad["status"] == "error" and "cannot load runner" in bad["error"]
    unknown = execute_run({"key": "k", "runner": "pipeline", "params": {"stagez": 2}})
    assert unknown["error"].startswith("field stagez: unknown parameter 'stagez'")


def test_pipeline_runner_without_communication_is_the_schedule_formula():
    # GPipe, p=4, m=8, 8 layers per stage: F = 8 x 100 us, B = 2 F; makespan = (m + p - 1)(F + B)
    r = pipeline_runner({"schedule": "gpipe", "stages": 4, "microbatches": 8, "layers": 32,
                         "fwd_ns_per_layer": 100_000, "activation_bytes": 0, "backend": "unused"})
    assert r["iteration_ns"] == r["pipeline_ns"] == 11 * 2_400_000
    assert r["dp_allreduce_ns"] == 0 and r["flows_simulated"] == 0
    assert r["max_bubble_fraction"] == pytest.approx(3 / 11, abs=1e-6)


def test_pipeline_runner_fixed_global_batch_splits_work():
    # 64 samples, dp 2, 4 micro-batches -> 8 samples each: F = 8 samples x 2 layers x 10 us = 160 us
    base = {"schedule": "gpipe", "stages": 2, "layers": 4, "fwd_ns_per_layer": 10_000, "activation_bytes": 0,
            "global_batch": 64, "dp": 2, "microbatches": 4}
    r = pipeline_runner(base)
    assert r["pipeline_ns"] == (4 + 2 - 1) * 3 * 160_000
    with pytest.raises(Exception, match="multiple of dp x microbatches = 6"):
        pipeline_runner({**base, "microbatches": 3})


@pytest.mark.skipif(not ns3_available(), reason=str(ns3_unusable_reason()))
@pytest.mark.ns3
def test_pipeline_runner_on_ns3_adds_measured_transfers():
    base = {"schedule": "gpipe", "stages": 2, "microbatches": 4, "layers": 8, "fwd_ns_per_layer": 100_000,
            "activation_bytes": 8 << 20, "bw_GBps": 12.5, "latency_ns": 1000, "backend": "ns3"}
    r = pipeline_runner(base)
    # one 8 MiB transfer: 2 x 1 us + 671 us on the wire, + TCP (within 2 %)
    assert 673_089 < r["p2p_ns"] <= 673_089 * 1.02
    # the schedule: (m + p - 1)(F + B) with F = 400 us, plus a transfer on the way down and one back up
    assert r["pipeline_ns"] == 5 * 1_200_000 + 2 * r["p2p_ns"]


def test_cli_sweep_table_summary_plot_and_dry_run(tmp_path, capsys):
    spec = write_spec(tmp_path, {"name": "toy", **GRID, "top": 2})
    out = tmp_path / "res"
    assert main(["-q", "sweep", str(spec), "-o", str(out), "-j", "2", "--plot", str(tmp_path / "best.png")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and printed[1].split()[-1] == "1010" and printed[2].split()[-1] == "1020"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"] == 6 and [b["iteration_ns"] for b in summary["best"]] == [1010, 1020]
    assert (tmp_path / "best.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["sweep", str(spec), "-o", str(out), "--dry-run"]) == 0
    assert all(line.split()[1] == "ok" for line in capsys.readouterr().out.splitlines())
    assert main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    assert "cannot read the sweep spec" in capsys.readouterr().err


@pytest.mark.slow
def test_54_plans_on_a_local_ray_instance(tmp_path):
    pytest.importorskip("ray", reason="Ray extra not installed (pip install -e .[ray])")
    backends = [b for b in available_backends() if b != "ns3"] or available_backends()
    if not backends:
        pytest.skip("no network backend available")
    grid = {"stages": [1, 2, 4], "microbatches": [4, 8, 16], "schedule": ["gpipe", "1f1b"], "dp": [1, 2, 4]}
    spec = spec_from_mapping({
        "runner": "pipeline",
        "base": {"layers": 16, "fwd_ns_per_layer": 50_000, "activation_bytes": 1 << 20, "grad_bytes": 8 << 20,
                 "bw_GBps": 25, "backend": backends[0]},
        "grid": grid,
    })
    assert len(spec.runs) == 54
    out = run_sweep(spec, tmp_path, ray_address="local", jobs=2)
    assert out.ran == 54 and not out.failed, out.failed[:1]
    assert len(read_results(tmp_path / "results.jsonl")) == 54
    best = ranked(out.records, "iteration_ns")[0]
    # more micro-batches only add bubble-free work here; the best plan has the fewest of them
    assert best["params"]["microbatches"] == 4
    assert best["result"]["iteration_ns"] == min(r["result"]["iteration_ns"] for r in out.records)
    again = run_sweep(spec, tmp_path, ray_address="local", jobs=2)
    assert (again.ran, again.skipped) == (0, 54)


def test_replay_runner_sweeps_a_real_trace(tmp_path):
    from pathlib import Path

    prefix = Path(__file__).parents[1].parent / "shared" / "traces" / "chakra_et" / "astra_custom_ring_8npus"
    if not (prefix / "custom_allreduce.0.et").exists():
        pytest.skip(f"shared traces not found at {prefix}")
    fluid = [b for b in ("analytical", "flow") if b in available_backends()]
    if not fluid:
        pytest.skip("no fluid backend available")
    (tmp_path / "c.yaml").write_text("name: ss8\ngroups:\n  - {name: g0, gpu: generic, count: 8, devices_per_node: 8,"
                                     "\n     intra_node: {kind: nvswitch, bw_GBps: 12.5, latency_ns: 1000}}\n")
    spec = write_spec(tmp_path, {"runner": "replay", "base": {"trace": str(prefix / "custom_allreduce"),
                                                              "cluster": "c.yaml"},
                                 "grid": {"backend": fluid, "chunks": [1, 2]}})
    from xsim_trace.sweep.spec import load_spec

    out = run_sweep(load_spec(spec), tmp_path / "out", jobs=2)
    assert not out.failed, out.failed[:1]
    times = [r["result"]["iteration_ns"] for r in out.records]
    assert len(times) == 2 * len(fluid) and min(times) > 0
    assert all(r["result"]["flows"] > 0 for r in out.records)


@pytest.mark.slow
def test_plan_runner_sweeps_bundled_plans_and_reshard_strategies(tmp_path):
    from pathlib import Path

    plans = Path(__file__).parents[1] / "traces" / "plans"
    if not (plans / "llama7b_h100_a100_pipeline.yaml").exists():
        pytest.skip(f"bundled plans not found in {plans}")
    spec = spec_from_mapping({"runner": "plan", "base": {"quick": True},
                              "grid": {"plan": [str(plans / "llama7b_h100_a100_pipeline.yaml")],
                                       "reshard": ["direct", "leader"]}})
    out = run_sweep(spec, tmp_path, jobs=2)
    assert not out.failed, out.failed[:1]
    by = {r["params"]["reshard"]: r["result"] for r in out.records}
    assert by["direct"]["ranks"] == by["leader"]["ranks"] == 24
    # leader-based resharding gathers then scatters: more reshard time than direct multi-flow here
    assert by["leader"]["reshard_ns"] > by["direct"]["reshard_ns"] > 0


def test_plot_labels_skip_absent_parameters_and_time_axis_has_units():
    from xsim_trace.sweep.summary import _axis, _label

    assert _label({"key": "k1", "params": {"a": 1}}, ["a", "chunks"]) == "a=1"  # no empty "chunks="
    assert _label({"key": "k1", "params": {}}, ["chunks"]) == "k1"
    assert _axis("iteration_ns", [3.2e7, 1e6]) == (1e6, "iteration (ms)")
    assert _axis("iteration_ns", [800.0]) == (1.0, "iteration (ns)")
    assert _axis("mfu", [0.4]) == (1.0, "mfu")
