"""The one home of Kineto (PyTorch profiler) vocabulary shared by the converters and validation:
event categories.  The streaming boundary both readers use (decompression errors, nesting depth,
time values) is :mod:`xsim_trace.io.json_input`; NCCL names are :mod:`xsim_trace.nccl_names`."""

from __future__ import annotations

#: host-side operator and annotation spans
CPU_CATS = frozenset({"cpu_op", "user_annotation", "python_function"})
#: CUDA / HIP runtime and driver calls
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime"})
#: device-side activity
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
