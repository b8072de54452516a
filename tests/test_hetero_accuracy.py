"""Heterogeneous measured-run rows: both plan forms parsed into deployments (stages x replicas, DeepSpeed's
pipe-major ranks, node GPU types), bad rows named by row and column, the closed form on small rows, and the
accuracy tool end to end on a small CSV."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from xsim_trace.validate.hetero_accuracy import evaluate, summarize
from xsim_trace.validate.hetero_predict import FITTED, node_links, predict, row_cluster_name, schedule_1f1b
from xsim_trace.validate.hetero_rows import COLUMNS, RawRow, RowError, parse_row, read_rows

REPO = Path(__file__).resolve().parents[1]
SHARED_CSV = REPO.parent / "shared" / "reference" / "hetero_measured.csv"

OPT = ("OPT-350M: 24 layers, hidden 1024, 16 heads x 64, seq 2048, vocab 50272 (plan indexes 26 'layers' = "
       "embedding + 24 blocks + head); fp16; Adam")
GPT2 = ("GPT-2 medium-like: 24 layers, hidden 1024, 16 heads, seq 1024, vocab 52256 (AMP layer index 0..30 incl. "
        "embedding/head); fp16; DeepSpeed(Megatron v1.1.5) pipeline")
MIT = "MIT cluster (Sailor SOSP'25 testbed): nodes of 8 GPUs of one type (RTX-3090 24GB, RTX-2080 11GB, Titan-RTX 24GB)"
AWS_HET = ("AWS: 3x p3.8xlarge (4x V100-16GB each, NVLink intra-node, 10 Gbps inter-node) + 1x g4dn.12xlarge "
           "(4x T4-16GB, PCIe, 50 Gbps)")
AWS_T4 = "AWS: 4x g4dn.12xlarge (4x T4 each), 50 Gbps PCIe intra-node, 50 Gbps inter-node"
SAILOR_PLAN = ("PP=2; S0: layers 0-11 on DP=2 [RTX-3090x8 TP8 | RTX-2080x8 TP8]; S1: layers 12-25 on DP=2 "
               "[Titan-RTXx8 TP8 | RTX-2080x8 TP8]; mbs=2; microbatches per pipeline replica=64")
BIG_PLAN = ("TP(mp)=1, DP=1, PP=16; layer boundaries [0, 4, 6, 8, 10, 12, 14, 16, 18, 19, 20, 21, 22, 23, 24, 25, 30] "
            "(AMP indexing, 30 units); mbs=32; grad-accum=1; ranks 0-15, node k = ranks 4k..4k+3")
AMP_PLAN = ("TP(mp)=1, DP=4, PP=4; layer boundaries [0, 7, 14, 20, 30] (AMP indexing, 30 units); mbs=1; "
            "grad-accum=8; ranks 0-15, node k = ranks 4k..4k+3")


def raw(row_id="R1", **fields) -> RawRow:
    base = {"row_id": row_id, "model_dims": GPT2, "seq": "1024", "gbs": "32", "mbs": "1", "cluster": AWS_HET,
            "gpus": "V100x12 + T4x4 (= 16 GPUs, 4 nodes x 4)", "plan": AMP_PLAN, "metric": "iteration_time",
            "value": "1.47", "notes": "HETEROGENEOUS; example"}
    base.update(fields)
    return RawRow(row_id, base)


def sailor(row_id="S1", **fields) -> RawRow:
    base = dict(model_dims=OPT, seq="2048", gbs="256", mbs="2", cluster=MIT, plan=SAILOR_PLAN,
                gpus="RTX-3090x8 + RTX-2080x16 + Titan-RTXx8 (= 32 GPUs, 4 nodes/VMs)", value="66.07")
    base.update(fields)
    return raw(row_id, **base)


# --- parsing -------------------------------------------------------------------------------------------------------
def test_amp_form_pipe_major_ranks_and_node_types():
    row = parse_row(raw())
    plan = row.plan
    assert (plan.form, plan.pp, plan.dp, plan.micro_batch, plan.micro_batches) == ("amp", 4, 4, 1, 8)
    assert plan.node_devices == ("V100-SXM2-16GB",) * 3 + ("T4",)  # "V100-16GB" in the cluster column picks 16 GB
    # AMP units: embedding, transpose, 24 blocks (units 2..25), transpose, norm, head, fp32 cast
    assert [s.layers for s in plan.stages] == [(0, 5), (5, 12), (12, 18), (18, 24)]
    assert [(s.embedding, s.head) for s in plan.stages] == [(True, False), (False, False), (False, False), (False, True)]
    # pipe-major: stage s holds ranks 4s..4s+3, so the last stage is the T4 node for every replica
    last = plan.stages[-1]
    assert [p.ranks for p in last.replicas] == [(12,), (13,), (14,), (15,)]
    assert {p.device for p in last.replicas} == {"T4"}
    assert row.measured_s == pytest.approx(1.47) and row.heterogeneous and not row.failed


def test_amp_form_tp_groups_and_mixed_replicas():
    plan = parse_row(raw(plan="TP(mp)=4, DP=2, PP=2; layer boundaries [0, 14, 30] (AMP indexing, 30 units); mbs=1; "
                              "grad-accum=16; ranks 0-15, node k = ranks 4k..4k+3", metric="run_failed", value="")).plan
    s1 = plan.stages[1]
    assert [p.ranks for p in s1.replicas] == [(8, 9, 10, 11), (12, 13, 14, 15)]
    assert [p.device for p in s1.replicas] == ["V100-SXM2-16GB", "T4"]
    assert not any(p.spans_nodes for s in plan.stages for p in s.replicas)


def test_sailor_form_stages_replicas_nodes():
    row = parse_row(sailor())
    plan = row.plan
    assert (plan.form, plan.pp, plan.dp, plan.micro_batches) == ("sailor", 2, 2, 64)
    # Sailor units: embedding (0), 24 blocks (1..24), head (25); inclusive ranges
    assert [s.layers for s in plan.stages] == [(0, 11), (11, 24)]
    assert [(s.embedding, s.head) for s in plan.stages] == [(True, False), (False, True)]
    # one node per replica, in plan order; "RTX-2080 11GB" in the cluster column is the 11 GB card (2080 Ti)
    assert plan.node_devices == ("RTX-3090", "RTX-2080-Ti", "Titan-RTX", "RTX-2080-Ti")
    assert [p.nodes for p in plan.stages[1].replicas] == [(2,) * 8, (3,) * 8]
    assert plan.world_size == 32


@pytest.mark.parametrize(
    "fields, column, message",
    [
        ({"gpus": "A100x12 + K80x4 (= 16 GPUs, 4 nodes x 4)"}, "gpus", "unknown GPU type 'K80'"),
        ({"plan": AMP_PLAN.replace("[0, 7, 14, 20, 30]", "[0, 7, 14, 20, 28]")}, "plan", "end at unit 28"),
        ({"plan": AMP_PLAN.replace("ranks 0-15", "ranks 0-11")}, "plan", r"do not match TP\*DP\*PP = 16"),
        ({"gpus": "V100x12 + T4x8 (= 20 GPUs, 5 nodes x 4)"}, "gpus", "20 GPUs listed"),
        ({"gbs": "64"}, "gbs", "gbs 64"),
        ({"seq": ""}, "seq", "positive integer"),
        ({"metric": "MFU", "value": "31.2"}, "metric", "not an iteration time"),
        ({"plan": "TP=2 everywhere"}, "plan", "neither the Sailor nor the AMP"),
        ({"model_dims": "a model"}, "model_dims", "layers"),
        ({"value": "n/a"}, "value", "expected seconds"),
    ],
)
def test_amp_row_errors_name_row_and_column(fields, column, message):
    with pytest.raises(RowError, match=message) as info:
        parse_row(raw("H900", **fields))
    assert info.value.column == column and info.value.row_id == "H900"
    assert str(info.value).startswith(f"row H900, column {column}: ")


@pytest.mark.parametrize(
    "plan, column, message",
    [
        (SAILOR_PLAN.replace("layers 12-25", "layers 13-25"), "plan", "do not follow on from unit 12"),
        (SAILOR_PLAN.replace("layers 12-25", "layers 12-24"), "plan", "end at unit 25"),
        (SAILOR_PLAN.replace("Titan-RTXx8 TP8", "Titan-RTXx8 TP4"), "plan", "TP4 on 8 GPUs"),
        (SAILOR_PLAN.replace("Titan-RTXx8", "Voodoo-5x8"), "plan", "unknown GPU type 'Voodoo-5'"),
        (SAILOR_PLAN.replace("PP=2", "PP=3"), "plan", "PP=3 but 2 stage"),
        (SAILOR_PLAN.replace("| RTX-2080x8 TP8]; S1", "]; S1").replace("S0: layers 0-11 on DP=2", "S0: layers 0-11 on DP=1"),
         "plan", "DP=2, stage S0 has DP=1"),
    ],
)
def test_sailor_row_errors_name_row_and_column(plan, column, message):
    with pytest.raises(RowError, match=message) as info:
        parse_row(sailor(plan=plan))
    assert info.value.column == column


def test_sailor_gpu_count_must_match_plan():
    with pytest.raises(RowError, match="the plan uses") as info:
        parse_row(sailor(gpus="RTX-3090x8 + RTX-2080x8 + Titan-RTXx8 (= 24 GPUs)"))
    assert info.value.column == "gpus"


def test_read_rows_needs_the_columns(tmp_path):
    p = tmp_path / "x.csv"
    p.write_text("row_id,plan\nH1,PP=1\n")
    with pytest.raises(Exception, match="missing column"):
        read_rows(p)


# --- prediction ----------------------------------------------------------------------------------------------------
def test_cluster_presets_and_links():
    row = parse_row(raw())
    assert row_cluster_name(row) == "aws-p3-g4dn"
    links = node_links(row, FITTED)
    v100, t4 = links[0], links[3]
    assert v100.intra_GBps == pytest.approx(75 * FITTED.nvlink_efficiency)  # NVLink quad
    assert t4.intra_GBps == pytest.approx(15.75 * FITTED.pcie_efficiency)  # PCIe 3.0 x16
    # NCCL over TCP: 10 Gb/s runs at the TCP/IP framing limit of the VPC's 9001 B jumbo frames (8949 of 9039 B
    # per frame), 50 Gb/s at the fitted ceiling of the host's socket path
    assert v100.nic_GBps == pytest.approx(10 * 8949 / 9039 / 8)
    assert t4.nic_GBps == pytest.approx(min(50 * 8949 / 9039, FITTED.tcp_ceiling_Gbps) / 8)
    assert FITTED.tcp_ceiling_Gbps < 50 * 1448 / 1538
    with pytest.raises(RowError, match="no cluster description") as info:
        node_links(parse_row(raw(cluster="somewhere else")), FITTED)
    assert info.value.column == "cluster"


def test_prediction_scales_with_the_slow_stage_and_flags_oom():
    fast = predict(parse_row(raw()))
    assert 0.1 < fast.iteration_s < 20 and not fast.out_of_memory
    # the same plan on an all-T4 cluster is slower: stages 0-2 move from V100 to T4
    slow = predict(parse_row(raw(cluster=AWS_T4, gpus="T4x16 (4 nodes x 4)")))
    assert slow.pipeline_s > fast.pipeline_s
    # micro-batches of 32 sequences of 1024 tokens on a 16-stage pipeline of T4s cannot fit
    big = predict(parse_row(raw(cluster=AWS_T4, gpus="T4x16 (4 nodes x 4)", mbs="32", metric="run_failed", value="",
                                plan=BIG_PLAN)))
    assert big.out_of_memory and big.peak_GiB > big.capacity_GiB


@pytest.mark.parametrize("p, m", [(1, 4), (4, 8), (4, 2), (8, 16)])
def test_1f1b_recursion_matches_the_homogeneous_formula(p, m):
    """Equal stages, free transfers: the last backward of stage 0 ends at (m + p - 1)(tf + tb)."""
    tf, tb = 3, 7
    ends = schedule_1f1b([tf] * p, [tb] * p, [0] * (p - 1), m)
    assert ends[0] == (m + p - 1) * (tf + tb)
    assert ends[-1] == m * (tf + tb) + (p - 1) * tf  # the last stage starts after p-1 forwards, then never waits


def test_1f1b_recursion_slow_stage_sets_the_pace():
    """One stage twice as slow: the steady state runs at its pace, transfers add to every hop."""
    fast = schedule_1f1b([1, 1, 1], [2, 2, 2], [0, 0], 16)[0]
    slow = schedule_1f1b([1, 2, 1], [2, 4, 2], [0, 0], 16)[0]
    assert slow >= 16 * 6 and slow > fast
    assert schedule_1f1b([1, 1], [2, 2], [5], 4)[0] > schedule_1f1b([1, 1], [2, 2], [0], 4)[0]


def test_prediction_is_deterministic():
    a, b = predict(parse_row(sailor())), predict(parse_row(sailor()))
    assert a == b


def _csv_text(rows: list[RawRow]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(COLUMNS))
    w.writeheader()
    for r in rows:
        w.writerow({k: r.fields.get(k, "") for k in COLUMNS})
    return out.getvalue()


def test_accuracy_tool_end_to_end(tmp_path):
    """A good AMP row, a failed one, a Sailor row and a row with an unknown GPU: one line each, the error row
    named and counted as 100%, the summary line last and exact."""
    rows = [raw("A1"), raw("A2", mbs="32", metric="run_failed", value="", plan=BIG_PLAN),
            sailor("S1"), raw("B1", gpus="V100x12 + K80x4 (= 16 GPUs, 4 nodes x 4)")]
    path = tmp_path / "rows.csv"
    path.write_text(_csv_text(rows))
    results = evaluate(read_rows(path))
    assert [r.row_id for r in results] == ["A1", "A2", "S1", "B1"]
    assert results[3].error.startswith("row B1, column gpus:") and results[3].abs_err_pct == 100.0
    assert results[1].failed and results[1].predicted_oom
    s = summarize(results)
    assert (s.rows, s.oom_right, s.oom_total) == (4, 1, 1) and s.worst_abs_err_pct == 100.0
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "accuracy_hetero.py"), "--csv", str(path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert any(line.startswith("B1") and "ERROR row B1, column gpus" in line for line in lines)
    assert any(line.startswith("A2") and "run_failed: predicted infeasible (out of memory" in line for line in lines)
    assert lines[-1] == s.line()
    assert lines[-1].startswith("rows 4 median_abs_err_pct ") and lines[-1].endswith(" oom_right 1/1")


def test_accuracy_tool_rows_filter(tmp_path):
    """--rows predicts only the named rows (the summary counts them alone); an unknown row_id is exit 2."""
    path = tmp_path / "rows.csv"
    path.write_text(_csv_text([raw("A1"), sailor("S1"), raw("A3", mbs="2", plan=AMP_PLAN.replace("mbs=1", "mbs=2")
                                                             .replace("grad-accum=8", "grad-accum=4"))]))
    tool = [sys.executable, str(REPO / "tools" / "accuracy_hetero.py"), "--csv", str(path)]
    proc = subprocess.run(tool + ["--rows", "A3, S1"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.strip().splitlines() if not line.startswith("#")]
    assert [line.split()[0] for line in lines[:-1]] == ["S1", "A3"]  # the CSV's order
    assert lines[-1].startswith("rows 2 ")
    bad = subprocess.run(tool + ["--rows", "A1,Z9"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "Z9" in bad.stderr and not bad.stdout.strip()


@pytest.mark.skipif(not SHARED_CSV.is_file(), reason="needs ../shared/reference/hetero_measured.csv")
def test_shared_table_every_row_has_a_line():
    # the MFU rows (a plan search each, minutes for the four-group clusters) are in tests/test_hetero_mfu.py
    raws = [r for r in read_rows(SHARED_CSV) if r.metric != "MFU"]
    results = evaluate(raws)
    assert len(results) == len(raws)
    errors = {r.row_id: r.error for r in results if r.error}
    # H019's layer list does not cover GPT-Neo: named, not skipped
    assert set(errors) == {"H019"}
    assert errors["H019"].startswith("row H019, column plan:")
    for r in results:
        if not r.error and not r.failed:
            assert r.predicted_s > 0
