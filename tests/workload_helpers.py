"""Shared builders for the workload tests."""

from __future__ import annotations

from xsim_trace.devices import get_device
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.model import ModelSpec, get_model
from xsim_trace.workload.program import Program
from xsim_trace.workload.timing import Timer


def small_llama(layers: int = 4, seq_len: int = 512) -> ModelSpec:
    return get_model("llama2-7b").with_(layers=layers, seq_len=seq_len, name="llama-small")


def setup(model: ModelSpec, fw: Framework, device: str = "H100", nic_gbps: float = 400.0) -> tuple[Program, Timer]:
    dev = get_device(device)
    return Program(model, fw), Timer(dev, LinkModel.for_device(dev, 8, nic_gbps), fw)


# A device that exists only in a user's --device-file (the device-file tests write it next to their inputs).
TEST_GPU_DEVICE_FILE = """devices:
  TestGPU-X:
    base: H100
    aliases: [testgpu]
    bf16_tflops: 500.0
    fp16_tflops: 500.0
"""
