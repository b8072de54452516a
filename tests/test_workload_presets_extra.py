"""Presets of issue 13 (Llama-3.1, Mixtral-8x22B, Qwen2.5) match their published parameter counts, and
the 4-GPU A100-40GB cluster preset loads and drives xsim estimate."""

from __future__ import annotations

import pytest

from xsim_trace.cluster import load_cluster
from xsim_trace.workload.model import get_model


@pytest.mark.parametrize("name, billions", [
    ("llama3.1-8b", 8.0), ("llama3.1-70b", 70.6), ("llama3.1-405b", 405.0), ("mixtral-8x22b", 141.0),
    ("qwen2.5-7b", 7.6), ("qwen2.5-14b", 14.7), ("qwen2.5-32b", 32.5), ("qwen2.5-72b", 72.7),
])
def test_parameter_counts(name, billions):
    assert get_model(name).total_params() / 1e9 == pytest.approx(billions, rel=0.015)


def test_a100_40g_4gpu_nodes():
    c = load_cluster("a100-40g-4gpu:3")
    assert c.num_ranks == 12 and c.groups[0].devices_per_node == 4
    assert c.groups[0].gpu_type == "A100-SXM4-40GB"
