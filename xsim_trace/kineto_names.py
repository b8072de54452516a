"""The one home of Kineto (PyTorch profiler) vocabulary shared by the reader
(:mod:`xsim_trace.io.kineto`), the converters and validation: event categories, the runtime calls that
matter (and those that do not), the argument keys of collectives.  NCCL names (collectives, kernels,
dtypes) are :mod:`xsim_trace.nccl_names`."""

from __future__ import annotations

#: host-side operator and annotation spans
CPU_CATS = frozenset({"cpu_op", "user_annotation", "python_function"})
#: CUDA / HIP runtime and driver calls
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime"})
#: device-side activity
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: every category the reader keeps
KEPT_CATS = CPU_CATS | RUNTIME_CATS | GPU_CATS

#: host calls that wait until device work finishes
SYNC_CALLS = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
                        "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize"})
#: ... those and the synchronous copy (validation's "blocking call" time)
BLOCKING_CALLS = SYNC_CALLS | {"cudaMemcpy"}
#: a stream waits for an event recorded on another stream
WAIT_CALLS = frozenset({"cudaStreamWaitEvent", "hipStreamWaitEvent"})
RECORD_CALLS = frozenset({"cudaEventRecord", "cudaEventRecordWithFlags", "hipEventRecord"})
#: host calls that launch one kernel
KERNEL_LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                                 "cudaLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel"})
#: host calls that launch kernels: one, or a CUDA graph of them
LAUNCH_CALLS = KERNEL_LAUNCH_CALLS | {"cudaGraphLaunch", "hipGraphLaunch"}
#: host calls that queue copies / fills (a pageable cudaMemcpyAsync blocks like a synchronize)
COPY_CALLS = frozenset({"cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy2DAsync"})

#: runtime calls that neither launch GPU work nor order it: not kept by the reader (they are most of
#: the runtime events of a busy trace, e.g. cudaEventQuery polling)
IGNORED_RUNTIME = frozenset({
    "cudaEventQuery", "cudaPeekAtLastError", "cudaGetLastError", "cudaStreamIsCapturing", "cudaGetDevice",
    "cudaSetDevice", "cudaGetDeviceCount", "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cudaFuncGetAttributes", "cudaFuncSetAttribute",
    "cudaDeviceGetAttribute", "cudaPointerGetAttributes", "cudaStreamGetPriority",
    "cudaDeviceGetStreamPriorityRange", "cudaDriverGetVersion", "cudaRuntimeGetVersion", "cudaGetDeviceProperties",
    "cudaGetDeviceProperties_v2", "cudaThreadExchangeStreamCaptureMode", "cudaStreamGetCaptureInfo",
    "cudaStreamGetCaptureInfo_v2", "cudaGetSymbolAddress", "cudaEventCreate", "cudaEventCreateWithFlags",
    "cudaEventDestroy", "cuGetProcAddress", "cuDevicePrimaryCtxGetState", "cuCtxGetCurrent",
})

#: cpu-op name prefixes of communication ops (their arguments are kept)
COMM_OP_PREFIXES = ("nccl:", "c10d::", "record_param_comms", "gloo:")
#: argument keys of collectives (on NCCL kernels and record_param_comms)
COLL_ARG_KEYS = (
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "In msg size",
    "Out msg size",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "In split size",
    "Out split size",
    "Src Rank",
    "Dst Rank",
    "Rank",
    "Global rank start",
    "Global rank stride",
)
#: argument keys of an op's input shapes
SHAPE_ARG_KEYS = ("Input Dims", "Input type")
#: the profiler's per-iteration span: ``ProfilerStep#<n>``
STEP_PREFIX = "ProfilerStep#"
