"""Megatron-style workload generator: model presets, framework parameters, per-layer compute and
communication, pipeline schedules, per-rank Chakra traces, SimAI text, memory and a closed-form
iteration estimate.  See docs/workload.md."""

from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.estimate import Estimate, StageEstimate, estimate
from xsim_trace.workload.framework import Framework, Recompute, Schedule
from xsim_trace.workload.generator import Workload, generate
from xsim_trace.workload.layout import Layout
from xsim_trace.workload.memory import StageMemory, stage_memory
from xsim_trace.workload.model import ModelSpec, get_model, list_models, load_model_file
from xsim_trace.workload.program import Program, megatron_formula_flops
from xsim_trace.workload.simai import simai_lines, write_simai
from xsim_trace.workload.spec_file import Setup, load_spec_file, make_setup
from xsim_trace.workload.timing import Timer

__all__ = [
    "Estimate",
    "Framework",
    "Layout",
    "LinkModel",
    "ModelSpec",
    "Program",
    "Recompute",
    "Schedule",
    "Setup",
    "StageEstimate",
    "StageMemory",
    "Timer",
    "Workload",
    "estimate",
    "generate",
    "get_model",
    "list_models",
    "load_model_file",
    "load_spec_file",
    "make_setup",
    "megatron_formula_flops",
    "simai_lines",
    "stage_memory",
    "write_simai",
]
