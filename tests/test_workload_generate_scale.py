"""The template-stamping generator against the straightforward per-rank reference builder: equal
traces in memory and byte-identical files, over tp / pp / dp / vpp / cp / ep / sp / ZeRO / overlap /
recompute / host overhead on and off, groups that cross node boundaries unevenly, rank subsets and
gzip; templates are shared by the ranks of a stage."""

from __future__ import annotations

import dataclasses
import filecmp
import os

import pytest

from xsim_trace.devices import get_device
from xsim_trace.errors import ConfigError
from xsim_trace.io import write_rank_set
from generator_reference import reference_generate
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.generator import generate, write_workload
from xsim_trace.workload.model import get_model
from xsim_trace.workload.program import Program
from xsim_trace.workload.timing import Timer

from workload_helpers import small_llama


def _setup(model, fw, *, gpus_per_node=8, host_ns=None, device="H100"):
    """``host_ns``: the device's host cost per module call (None: the catalog's)."""
    dev = get_device(device)
    if host_ns is not None:
        dev = dataclasses.replace(dev, host_op_overhead_ns=host_ns)
    return Program(model, fw), Timer(dev, LinkModel.for_device(dev, gpus_per_node, 400.0), fw)


def _small_moe():
    return get_model("mixtral-8x7b").with_(layers=2, seq_len=256, name="moe-small")


CASES = {
    "tp-pp-dp-sp-zero1-overlap": (small_llama(), Framework(tp=2, pp=2, dp=2, global_batch=8, sequence_parallel=True,
                                                           distributed_optimizer=True, overlap_grad_reduce=True),
                                  {"host_ns": 260_000}),
    "interleaved-vpp2": (small_llama(), Framework(tp=2, pp=2, vpp=2, schedule="interleaved", global_batch=4), {}),
    "cp-gpipe-zero1-no-host": (small_llama(), Framework(pp=4, dp=2, cp=2, schedule="gpipe", zero_stage=1, global_batch=8),
                               {"host_ns": 0}),
    "moe-ep-etp-zero2": (_small_moe(), Framework(tp=2, pp=2, dp=2, ep=2, etp=1, zero_stage=2, global_batch=4,
                                                 overlap_grad_reduce=True), {"host_ns": 100_000}),
    "full-recompute-uneven-nodes": (small_llama(layers=3, seq_len=256).with_(flash_attention=False),
                                    Framework(tp=2, pp=3, dp=2, recompute="full", global_batch=6),
                                    {"gpus_per_node": 3, "host_ns": 50_000}),
    "fsdp-zero3-tied-pp-host": (get_model("gpt3-1.3b").with_(layers=4, seq_len=256),
                                Framework(pp=2, dp=2, cp=2, zero_stage=3, global_batch=4), {"host_ns": 40_000}),
    "cp-ring-full-recompute-uneven-nodes": (small_llama(layers=2, seq_len=768),
                                            Framework(tp=2, cp=3, pp=2, recompute="full", global_batch=2),
                                            {"gpus_per_node": 4}),
    "selective-no-flash-dp-only": (small_llama(layers=2, seq_len=256).with_(flash_attention=False),
                                   Framework(dp=4, recompute="selective", global_batch=4), {"gpus_per_node": 2}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_as_reference(name, tmp_path):
    model, fw, kw = CASES[name]
    program, timer = _setup(model, fw, **kw)
    ref = reference_generate(program, timer)
    new = generate(program, timer)
    assert new.comm_groups == ref.comm_groups
    assert sorted(new.traces) == sorted(ref.traces)
    for r in ref.traces:
        assert new.traces[r] == ref.traces[r], f"rank {r}"
    write_rank_set(tmp_path / "ref" / "w", ref.traces, ref.comm_groups)
    written = write_workload(tmp_path / "new" / "w", program, timer)
    _same_files(tmp_path / "ref", tmp_path / "new")
    assert written.nodes == sum(len(t) for t in ref.traces.values())
    assert written.ranks == fw.world_size


def test_uneven_node_boundaries_give_several_templates_per_stage(tmp_path):
    model, fw, kw = CASES["full-recompute-uneven-nodes"]
    written = write_workload(tmp_path / "w", *_setup(model, fw, **kw))
    assert written.templates_built > fw.pp  # TP pairs {0,1} and {2,3} differ across 3-GPU nodes


def test_one_template_per_stage(tmp_path):
    program, timer = _setup(small_llama(), Framework(tp=2, pp=2, dp=4, global_batch=8))
    written = write_workload(tmp_path / "w", program, timer)
    assert written.templates_built == 2 and written.ranks == 16
    assert len(written.paths) == 17 and written.paths[-1].name == "w.comm_groups.json"


def test_rank_subset_and_gzip(tmp_path):
    model, fw, kw = CASES["moe-ep-etp-zero2"]
    program, timer = _setup(model, fw, **kw)
    ranks = [6, 1, 5]
    ref = reference_generate(program, timer, ranks)
    new = generate(program, timer, ranks)
    assert new.traces == ref.traces and new.comm_groups == ref.comm_groups
    write_rank_set(tmp_path / "ref" / "w", ref.traces, ref.comm_groups, compress=True)
    write_workload(tmp_path / "new" / "w", program, timer, ranks, compress=True)
    _same_files(tmp_path / "ref", tmp_path / "new")
    assert sorted(os.listdir(tmp_path / "new")) == ["w.1.et.gz", "w.5.et.gz", "w.6.et.gz", "w.comm_groups.json"]


def test_deterministic_and_progress(tmp_path):
    program, timer = _setup(*CASES["interleaved-vpp2"][:2])
    seen = []
    write_workload(tmp_path / "a" / "w", program, timer, progress=seen.append)
    write_workload(tmp_path / "b" / "w", program, timer)
    _same_files(tmp_path / "a", tmp_path / "b")
    assert seen == [1] * program.fw.world_size


def test_rank_outside_world():
    program, timer = _setup(small_llama(), Framework(tp=2, global_batch=1))
    with pytest.raises(ConfigError, match="rank 2 outside world of 2"):
        write_workload("/nonexistent/w", program, timer, [2])
    with pytest.raises(ConfigError):
        generate(program, timer, [-1])


def _same_files(a, b):
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b))
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)
