"""``xsim generate --plan DEPLOYMENT_PLAN``: one workload per device group, each stage timed on its
own group's device and TP degree; reshards, checks, replay, memory flag, SimAI per group, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from xsim_trace.cli.main import main
from xsim_trace.devices import get_device
from xsim_trace.devices.compute import kernel_time_ns
from xsim_trace.graph import attrs as A
from xsim_trace.graph.checks import check_rank_set
from xsim_trace.graph.kinds import NodeType
from xsim_trace.io import read_rank_set
from xsim_trace.rewrite.hetero_generate import generate_for_plan, load_plan_for_generate, plan_for_generate
from xsim_trace.plan.parse import plan_from_mapping
from xsim_trace.rewrite.rewriter import rewrite

from rewrite_helpers import fixed_template, plan_dict

PLANS = Path(__file__).resolve().parents[1] / "traces" / "plans"
PIPELINE = PLANS / "llama7b_h100_a100_pipeline.yaml"


@pytest.fixture(scope="module")
def wl():
    plan, wmodel = load_plan_for_generate(str(PIPELINE))
    return generate_for_plan(plan, wmodel)


def _stage(wl, pipeline: int, stage: int):
    return next(s for s in wl.stages if (s.pipeline, s.stage) == (pipeline, stage))


def test_rank_count_and_groups(wl):
    # 2 replicas x (H100 TP 4 + A100 TP 8)
    assert sorted(wl.result.traces) == list(range(24))
    summary = wl.summary()
    assert [(g["name"], g["device"], len(g["ranks"])) for g in summary["groups"]] == [
        ("h100", "H100-SXM5-80GB", 8), ("a100", "A100-SXM4-80GB", 16)]
    h100 = summary["groups"][0]
    assert [s["layers"] for s in h100["stages"]] == [[[0, 16]], [[0, 16]]] and h100["ranks"] == [0, 1, 2, 3, 12, 13, 14, 15]
    for r in wl.result.layout.ranks:
        meta = wl.result.traces[r.rank].metadata
        assert meta.attr(A.META_DEVICE) == r.device and meta.attr(A.META_TP) == r.tp


def test_each_stage_is_timed_on_its_own_device(wl):
    from xsim_trace.workload import ops as O
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.model import get_model

    wmodel = get_model("llama2-7b").with_(seq_len=2048)
    for (group, tp), tm in wl.templates.items():
        dev = get_device(wl.plan.group(group).device)
        assert (tm.device, tm.tp) == (dev.name, tp)
        fw = Framework(tp=tp)
        want = sum(kernel_time_ns(o.kernel_class, o.flops, o.bytes_accessed, dev, include_overhead=False)
                   + o.kernels * dev.kernel_overhead_ns for o in O.layer_forward(wmodel, fw) if isinstance(o, O.ComputeOp))
        assert _stage(wl, 0, 0 if group == "h100" else 1).layer_fwd_ns == want
    h, a = _stage(wl, 0, 0), _stage(wl, 0, 1)
    assert h.tp == 4 and a.tp == 8
    ratio = (h.layer_fwd_ns + h.layer_bwd_ns) / (a.layer_fwd_ns + a.layer_bwd_ns)
    # per-op time ratios from the catalog: sharded compute 8/4 * rate_A / rate_H, memory traffic between
    # bw_A / bw_H (replicated) and 8/4 * bw_A / bw_H (sharded), launch overhead 1; the layer's ratio lies between
    dh, da = get_device("H100"), get_device("A100-SXM4-80GB")
    r_gemm = (8 / 4) * (da.peak_flops() * da.gemm_efficiency) / (dh.peak_flops() * dh.gemm_efficiency)
    r_attn = (8 / 4) * (da.peak_flops() * da.attention_efficiency) / (dh.peak_flops() * dh.attention_efficiency)
    r_mem = (da.hbm_bytes_per_s * da.mem_efficiency) / (dh.hbm_bytes_per_s * dh.mem_efficiency)
    bounds = (r_gemm, r_attn, r_mem, 2 * r_mem, 1.0)
    assert ratio < 1.0  # the H100 stage's layer is faster
    assert min(bounds) <= ratio <= max(bounds)
    assert ratio == pytest.approx(r_gemm, rel=0.10)  # GEMMs dominate a 7B layer at seq 2048


def test_reshard_between_tp4_and_tp8(wl):
    traces = wl.result.traces
    h100_rank, a100_rank = 0, 4  # pipeline 0: stage 0 on ranks 0-3 (TP 4), stage 1 on ranks 4-11 (TP 8)
    for rank, want in ((h100_rank, NodeType.COMM_SEND), (a100_rank, NodeType.COMM_RECV)):
        fwd = [n for n in traces[rank].nodes if n.attr(A.COMM_KIND) == "reshard" and n.attr(A.PHASE) == "fwd"
               and n.attr(A.XFER_PHASE) != "allgather"]
        assert fwd and all(n.type == want for n in fwd)
    # the consumer's TP 8 group then all-gathers the whole boundary tensor (one per micro-batch)
    gathers = [n for n in traces[a100_rank].nodes if n.attr(A.XFER_PHASE) == "allgather" and n.attr(A.PHASE) == "fwd"]
    assert len(gathers) == wl.plan.micro_batches
    assert all(n.comm_size_bytes == wl.plan.model.boundary_activation_bytes() for n in gathers)
    # direct TP 4 -> 8: each source sends to 2 destinations, per micro-batch
    sends = [n for n in traces[h100_rank].nodes if n.type == NodeType.COMM_SEND and n.attr(A.COMM_KIND) == "reshard"
             and n.attr(A.PHASE) == "fwd"]
    assert len(sends) == 2 * wl.plan.micro_batches
    assert all(n.comm_size_bytes == wl.plan.model.boundary_activation_bytes() // 8 for n in sends)


def test_rank_set_checks_clean(wl):
    assert check_rank_set(wl.result.traces, wl.result.comm_groups) == []


def test_memory_report_and_oom_flag():
    doc = yaml.safe_load(PIPELINE.read_text())
    doc["micro_batches"], doc["global_batch"] = 2, 4
    doc["device_groups"][0] = {"name": "h100", "device": "V100-SXM2-16GB", "count": 8}  # a small device ...
    doc["pipelines"][0]["stages"][0]["layers"] = [0, 28]  # ... holding most layers
    doc["pipelines"][0]["stages"][1]["layers"] = [28, 32]
    plan, wmodel = plan_for_generate(doc, "oom.yaml")
    out = generate_for_plan(plan, wmodel)
    small = _stage(out, 0, 0)
    mem = small.memory
    assert mem.out_of_memory and mem.capacity_bytes == get_device("V100-SXM2-16GB").hbm_bytes
    assert mem.total_bytes == mem.weights_bytes + mem.grads_bytes + mem.optimizer_bytes + mem.activations_bytes
    assert mem.optimizer_bytes == 6 * mem.weights_bytes  # 16 B/param: bf16 weight + grad, 12 B fp32 optimizer state
    assert not _stage(out, 0, 1).memory.out_of_memory
    summary = out.summary()
    assert summary["out_of_memory"] and summary["oom_stages"] == ["pipelines[0].stages[0] (h100)", "pipelines[1].stages[0] (h100)"]
    v100 = summary["groups"][0]
    assert v100["stages"][0]["memory"]["out_of_memory"] and v100["hbm_GiB"] == 16


def test_rewriter_takes_one_template_per_group():
    plan = plan_from_mapping(plan_dict())
    fast, slow = fixed_template(100_000, 200_000), fixed_template(300_000, 600_000, device="A100-SXM4-80GB")
    res = rewrite(plan, {"h100": fast, "a100": slow})
    durations = {}
    for r in res.layout.ranks:
        for n in res.traces[r.rank].nodes:
            if n.type == NodeType.COMP and n.attr(A.LAYER) is not None:
                durations.setdefault((r.group, n.attr(A.PHASE)), set()).add(n.duration_ns)
    # each stage's template was made on its own device: only the TP degree scales it (template TP 1 -> stage TP)
    assert max(durations[("h100", "fwd")]) < 100_000 and max(durations[("a100", "fwd")]) < 300_000
    assert min(durations[("a100", "fwd")]) > max(durations[("h100", "fwd")])
    same = rewrite(plan, {("h100", 2): fast, "a100": slow})
    assert same.traces[0].nodes == res.traces[0].nodes
    from xsim_trace.errors import ConfigError

    with pytest.raises(ConfigError, match="no template for device group 'a100' at TP 4"):
        rewrite(plan, {"h100": fast})


def test_cli_generate_replay_and_summary(tmp_path, capsys):
    plan = _bad(tmp_path, "two_microbatches", lambda d: d.update(micro_batches=2, global_batch=4))  # the bundled plan, faster
    out = tmp_path / "gen" / "l7"
    assert main(["generate", "--model", "llama2-7b", "--plan", str(plan), "--out", str(out), "--cluster", "mixed-h100-a100",
                 "--summary", str(tmp_path / "s.json")]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote 26 file(s) to {out}: plan llama7b-h100tp4-a100tp8, 24 ranks in 2 group(s): h100 8 x H100")
    assert "every stage fits in memory" in line
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["world_size"] == 24 and not summary["out_of_memory"] and len(summary["files"]) == 26
    assert read_rank_set(str(out)).ranks == list(range(24))
    placed = yaml.safe_load(Path(f"{out}.cluster.yaml").read_text())
    names = [g["name"] for g in placed["groups"]]
    assert [names[placed["rank_map"][r][0]] for r in (0, 3, 4, 11, 12, 16)] == ["h100", "h100", "a100", "a100", "h100", "a100"]
    assert main(["trace", "check", str(out)]) == 0
    capsys.readouterr()
    # the stock preset numbers its groups h100 first, so A100-stage ranks would land on H100s: refused
    # (naming both devices) unless --retarget; the placed cluster file puts every rank on its own device
    assert main(["replay", str(out), "--cluster", "mixed-h100-a100", "--out", str(tmp_path / "r0"), "--no-plot",
                 "--no-timeline"]) == 2
    err = capsys.readouterr().err
    assert "captured on A100-SXM4-80GB" in err and "H100-SXM5-80GB" in err
    # the retargeted replay runs under the default NCCL collective model (it used to deadlock: the consumer's
    # all-gather of a boundary tensor was created with the producer's send and could enter its TP group's
    # stream before a TP collective of its previous op on one member and after it on another)
    for cluster, d, extra in ((f"{out}.cluster.yaml", "r1", []), ("mixed-h100-a100", "r2", ["--retarget"])):
        assert main(["replay", str(out), "--cluster", cluster, "--out", str(tmp_path / d), "--no-plot", "--no-timeline",
                     *extra]) == 0
        rep = json.loads((tmp_path / d / "summary.json").read_text())
        assert rep["iteration_ns"] > 0
    assert "iteration time:" in capsys.readouterr().out


@pytest.mark.parametrize("reshard", ["direct", "leader"])
def test_each_rank_enters_a_groups_collectives_in_program_order(tmp_path, reshard):
    """On every rank the collectives of one process group form a dependency chain, so that every
    member enters them in one order whatever the timing (NCCL requires it; a boundary all-gather
    created with the producer's send used to float free of the consumer's TP collectives)."""
    plan = _bad(tmp_path, "mb4", lambda d: d.update(micro_batches=4, global_batch=8, reshard=reshard))
    out = tmp_path / "g"
    assert main(["generate", "--model", "llama2-7b", "--plan", str(plan), "--out", str(out),
                 "--cluster", "mixed-h100-a100"]) == 0
    for rank, trace in read_rank_set(str(out)).traces.items():
        before: dict[int, set[int]] = {}
        last_of_group: dict[str, int] = {}
        for n in sorted(trace.nodes, key=lambda n: n.id):  # ids follow creation: deps point back
            before[n.id] = set().union(*([{d} | before[d] for d in n.deps] or [set()]))
            if n.type == NodeType.COMM_COLL:
                prev = last_of_group.get(n.pg_name)
                assert prev is None or prev in before[n.id], (rank, n.pg_name, prev, n.name)
                last_of_group[n.pg_name] = n.id


def test_cli_simai_one_file_per_group(tmp_path, capsys):
    text_mod = pytest.importorskip("converters.text")
    assert main(["generate", "--plan", str(PIPELINE), "--format", "simai", "--out", str(tmp_path / "w.txt")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.a100.txt", "w.h100.txt"]
    for group, tp in (("h100", 4), ("a100", 8)):
        w = text_mod.parse_workload((tmp_path / f"w.{group}.txt").read_text())
        assert w.parallelism == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
        assert w.params["model_parallel_NPU_group"] == tp and w.params["pp"] == 2
        # gradients, 16 layers x (attention + mlp), embedding (h100 stage) or head (a100 stage)
        assert len(w.layers) == 1 + 2 * 16 + 1


def test_spec_file_plan_still_works(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: {base: llama2-7b, layers: 2, seq_len: 256}\nframework: {tp: 2, dp: 2, global_batch: 4}\n")
    assert main(["generate", "--plan", str(spec), "--out", str(tmp_path / "g")]) == 0
    assert read_rank_set(str(tmp_path / "g")).ranks == [0, 1, 2, 3]


def _bad(tmp_path, name: str, edit) -> Path:
    doc = yaml.safe_load(PIPELINE.read_text())
    edit(doc)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("name, edit, extra, message", [
    ("gpu", lambda d: d["device_groups"][1].update(device="Z9000"), [], "field device_groups[1].device: unknown device 'Z9000'"),
    ("gap", lambda d: d["pipelines"][0]["stages"][1].update(layers=[17, 32]), [],
     "field pipelines[0].stages[1].layers: layers [16, 17) are not covered"),
    ("tp", lambda d: d["pipelines"][0]["stages"][1].update(tp=6), [],
     "field pipelines[0].stages[1].tp: TP 6 does not divide the 32 attention heads"),
    ("type", lambda d: d.update(micro_batches="eight"), [], "field micro_batches: expected an integer, found 'eight'"),
    ("nomodel", lambda d: d.pop("model"), [], "field model: the plan names no model"),
    ("model", lambda d: None, ["--model", "llama2-13b"], "field model: the plan's model llama2-7b disagrees with --model llama2-13b"),
])
def test_bad_plans_are_one_line_and_write_nothing(tmp_path, capsys, name, edit, extra, message):
    plan = _bad(tmp_path, name, edit)
    out = tmp_path / "out"
    assert main(["generate", "--plan", str(plan), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"xsim: error: file {plan}, ") and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [plan.name]
