"""Every attribute name xsim reads or writes on Chakra nodes and metadata, in one place.

Names and wire kinds follow the conventions the Chakra tools and ASTRA-sim consumers expect.
"""

from __future__ import annotations

from xsim_trace.graph.kinds import AttrKind

# --- node attributes understood by Chakra consumers -------------------------------------------
IS_CPU_OP = "is_cpu_op"  # bool: node runs on the host CPU thread, not a device stream
COMM_TYPE = "comm_type"  # int64: CollectiveType of a COMM_COLL node
COMM_SIZE = "comm_size"  # int64: bytes moved by a collective or a send/recv
COMM_SRC = "comm_src"  # int32: sending rank of a COMM_RECV / COMM_SEND
COMM_DST = "comm_dst"  # int32: receiving rank of a COMM_SEND
COMM_TAG = "comm_tag"  # int32: tag pairing a send with its recv
TENSOR_SIZE = "tensor_size"  # uint64: bytes of a MEM_LOAD / MEM_STORE
NUM_OPS = "num_ops"  # int64: floating-point operations of a COMP node
PG_NAME = "pg_name"  # string: process-group id ("" or "0" = all ranks)
INVOLVED_DIM = "involved_dim"  # bool_list: which network dimensions a collective spans

# --- xsim's own node attributes (consumers that don't know them ignore them) -------------------
STREAM = "stream"  # int64: CUDA stream (or -1 for the CPU thread) the node ran on
THREAD = "tid"  # int64: host thread of a CPU op
OP_SCHEMA = "op_schema"  # string: operator schema of the captured op
KERNEL_CLASS = "kernel_class"  # string: gemm / attention / elementwise / ... for compute scaling
FLOPS = "flops"  # int64 (alias of NUM_OPS for tools that read it)
BYTES_ACCESSED = "bytes_accessed"  # int64: HBM bytes a kernel reads + writes, for roofline scaling
DELAY = "is_delay"  # bool: a GPU idle gap kept from the trace as a timed no-op
LAYER = "layer"  # int64: transformer layer index a node belongs to
MICROBATCH = "microbatch"  # int64: micro-batch index in a pipeline schedule
COMM_KIND = "comm_kind"  # string: tp / dp / pp / reshard / ep / other, for the breakdown
NCCL_ALGO = "nccl_algo"  # string: Ring / Tree / ... as captured, when known
MEASURED_DURATION_NS = "measured_duration_ns"  # int64: duration as captured, for validation
DURATION_NS = "duration_ns"  # int64: exact duration in ns (duration_micros is whole microseconds)

# --- global metadata attributes -----------------------------------------------------------------
META_RANK = "rank"  # int64
META_WORLD_SIZE = "world_size"  # int64
META_SOURCE = "source"  # string: which converter / generator wrote the file
META_MEASURED_STEP_NS = "measured_step_ns"  # int64: measured ProfilerStep duration
META_STEP = "profiler_step"  # int64: which ProfilerStep#N was converted
META_DEVICE = "device_name"  # string: GPU name from the capture
META_COMM_GROUPS = "comm_groups"  # string: JSON {"<pg id>": [ranks...]}

#: Wire kind of each known attribute; writers use it, checks compare against it.
KIND_OF: dict[str, AttrKind] = {
    IS_CPU_OP: AttrKind.BOOL,
    COMM_TYPE: AttrKind.INT64,
    COMM_SIZE: AttrKind.INT64,
    COMM_SRC: AttrKind.INT32,
    COMM_DST: AttrKind.INT32,
    COMM_TAG: AttrKind.INT32,
    TENSOR_SIZE: AttrKind.UINT64,
    NUM_OPS: AttrKind.INT64,
    PG_NAME: AttrKind.STRING,
    INVOLVED_DIM: AttrKind.BOOL_LIST,
    STREAM: AttrKind.INT64,
    THREAD: AttrKind.INT64,
    OP_SCHEMA: AttrKind.STRING,
    KERNEL_CLASS: AttrKind.STRING,
    FLOPS: AttrKind.INT64,
    BYTES_ACCESSED: AttrKind.INT64,
    DELAY: AttrKind.BOOL,
    LAYER: AttrKind.INT64,
    MICROBATCH: AttrKind.INT64,
    COMM_KIND: AttrKind.STRING,
    NCCL_ALGO: AttrKind.STRING,
    MEASURED_DURATION_NS: AttrKind.INT64,
    DURATION_NS: AttrKind.INT64,
    META_RANK: AttrKind.INT64,
    META_WORLD_SIZE: AttrKind.INT64,
    META_SOURCE: AttrKind.STRING,
    META_MEASURED_STEP_NS: AttrKind.INT64,
    META_STEP: AttrKind.INT64,
    META_DEVICE: AttrKind.STRING,
    META_COMM_GROUPS: AttrKind.STRING,
}

# --- heterogeneity rewriter (xsim_trace.rewrite) ------------------------------------------------
PHASE = "phase"  # string: fwd / bwd of a pipeline op
PIPELINE = "pipeline"  # int64: DP replica (pipeline) index of a rank or node
PIPE_STAGE = "pipeline_stage"  # int64: pipeline stage index
MODEL_CHUNK = "model_chunk"  # int64: model chunk (interleaved 1F1B) of a node
PP_BOUNDARY = "pp_boundary"  # string: "p<pipe>:v<from>->v<to>" of a stage-boundary comm node
COMM_ROOT = "comm_root"  # int32: root rank of a BROADCAST / GATHER / SCATTER
RING_ORDER = "ring_order"  # int64_list: ranks of a ring collective in ring order
META_TP = "tp_degree"  # int64: TP degree of a rank's stage
META_DEVICE_GROUP = "device_group"  # string: plan device group of a rank
META_PLAN = "plan"  # string: name of the deployment plan a trace was rewritten for
XFER_PHASE = "transfer_phase"  # string: pp / direct / gather / p2p / scatter / broadcast step of a boundary transfer

KIND_OF.update({
    PHASE: AttrKind.STRING,
    PIPELINE: AttrKind.INT64,
    PIPE_STAGE: AttrKind.INT64,
    MODEL_CHUNK: AttrKind.INT64,
    PP_BOUNDARY: AttrKind.STRING,
    COMM_ROOT: AttrKind.INT32,
    RING_ORDER: AttrKind.INT64_LIST,
    META_TP: AttrKind.INT64,
    META_DEVICE_GROUP: AttrKind.STRING,
    META_PLAN: AttrKind.STRING,
    XFER_PHASE: AttrKind.STRING,
})

# --- converter provenance (xsim-convert) --------------------------------------------------------
MODULE = "module"  # string: innermost nn.Module / annotation scope a node ran under (Megatron names)
LAUNCH_OP = "launch_op"  # string: the CPU op that launched a GPU node
KIND_OF.update({MODULE: AttrKind.STRING, LAUNCH_OP: AttrKind.STRING})
META_STEP_START_NS = "step_start_ns"  # int64: when the converted step began, on the capture's clock (ns)
KIND_OF[META_STEP_START_NS] = AttrKind.INT64
# --- workload shape (generator, rewriter): what a trace's sizes were computed for -----------------
META_SEQ_LEN = "seq_len"  # int64: tokens per sequence
META_MICRO_BATCH = "micro_batch_size"  # int64: sequences per micro-batch
KIND_OF.update({META_SEQ_LEN: AttrKind.INT64, META_MICRO_BATCH: AttrKind.INT64})
