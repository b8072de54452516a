"""Framework families: registry lookup, defaults users get, and what each field changes."""

from __future__ import annotations

import dataclasses

import pytest

from xsim_trace.errors import ConfigError
from xsim_trace.workload.estimate import estimate
from xsim_trace.workload.families import DEFAULT_FAMILY, FAMILIES, FrameworkFamily, get_family, list_families
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.generator import generate
from xsim_trace.workload.spec_file import make_setup

from generator_reference import reference_generate
from workload_helpers import small_llama


def test_registry_names_aliases_and_default():
    assert DEFAULT_FAMILY == "megatron-core"
    assert {"megatron-core", "nemo", "torchtitan", "deepspeed"} <= set(list_families())
    assert get_family(None).name == "megatron-core"
    assert get_family("Megatron").name == "megatron-core"
    assert get_family("FSDP2").name == "torchtitan"
    assert get_family(FAMILIES["nemo"]) is FAMILIES["nemo"]
    for fam in FAMILIES.values():
        assert fam.source and fam.description
        assert dataclasses.is_dataclass(fam)
        with pytest.raises(dataclasses.FrozenInstanceError):
            fam.host_module_ns = 1  # type: ignore[misc]


def test_unknown_family_lists_known_ones():
    with pytest.raises(ConfigError) as err:
        get_family("jax-pax")
    msg = str(err.value)
    assert "jax-pax" in msg and "megatron-core" in msg and "torchtitan" in msg and "field framework" in msg


def test_fields_are_checked():
    with pytest.raises(ConfigError, match="graph_host_fraction"):
        FAMILIES["megatron-core"].with_(graph_host_fraction=1.5)
    with pytest.raises(ConfigError, match="grad_reduce_bytes"):
        FAMILIES["megatron-core"].with_(grad_reduce_bytes=3)


def _setup(framework, **fw_kw):
    fw = Framework(**{"tp": 2, "dp": 2, "global_batch": 4, **fw_kw})
    return make_setup(small_llama(), fw, "H100", framework=framework)


def test_users_get_a_host_cost_by_default():
    setup = _setup(None)
    assert setup.timer.family.name == "megatron-core"
    assert setup.timer.host_call_ns == FAMILIES["megatron-core"].host_module_ns
    bare = make_setup(small_llama(), setup.fw, "H100")
    assert estimate(bare.program, bare.timer).step_ns == estimate(setup.program, setup.timer).step_ns
    # a host-bound small model: the host model matters
    none = dataclasses.replace(setup.timer, family=None)
    assert estimate(setup.program, setup.timer).step_ns > estimate(setup.program, none).step_ns


def test_cuda_graphs_cut_host_cost_and_device_override_wins():
    eager = _setup("megatron-core")
    graphs = _setup(FAMILIES["megatron-core"].with_(cuda_graphs=True))
    assert graphs.timer.host_call_ns == pytest.approx(eager.timer.host_call_ns * 0.05)
    assert estimate(graphs.program, graphs.timer).step_ns < estimate(eager.program, eager.timer).step_ns
    dev = dataclasses.replace(eager.timer.device, host_op_overhead_ns=7_000)
    assert dataclasses.replace(eager.timer, device=dev).host_call_ns == 7_000


def test_step_host_work_and_grad_dtype_reach_estimate_and_generator():
    fam = FrameworkFamily(name="custom", description="test", source="test", host_module_ns=50_000,
                          step_host_ns=3_000_000, data_loading_ns=1_000_000, grad_reduce_bytes=2,
                          optimizer_launches_per_bucket=0)
    base = _setup(fam.with_(step_host_ns=0, data_loading_ns=0))
    extra = _setup(fam)
    assert estimate(extra.program, extra.timer).step_ns - estimate(base.program, base.timer).step_ns == 4_000_000
    ref = reference_generate(extra.program, extra.timer)
    new = generate(extra.program, extra.timer)
    assert new.traces == ref.traces
    sizes = {n.attr("comm_size") for t in new.traces.values() for n in t.nodes if n.name.startswith("dp_grad")}
    fp32 = generate(*_pt(_setup(fam.with_(grad_reduce_bytes=4))))
    sizes32 = {n.attr("comm_size") for t in fp32.traces.values() for n in t.nodes if n.name.startswith("dp_grad")}
    assert sizes and sizes32 and max(sizes32) == 2 * max(sizes)


def _pt(setup):
    return setup.program, setup.timer
