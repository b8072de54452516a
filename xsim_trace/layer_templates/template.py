"""Per-layer templates: a layer's forward and backward compute and TP communication, measured on
one device at one TP degree, from which the rewriter builds any stage of any plan.

:func:`extract_templates` reads them from a captured or generated trace: nodes carry the ``layer``
attribute (or a name like ``layers.7.mlp`` / ``layer_7`` / ``layer7``), the ``phase`` attribute (or a
name with ``bwd`` / ``backward`` / ``grad``) says which pass; nodes named for the embedding go to the
pre-layer template, nodes named for the head / loss to the post-layer template.
:func:`templates_from_model` builds them from model geometry: the workload generator's per-layer
ops timed by the device catalog's roofline.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Iterable

from xsim_trace.devices import KernelClass, classify_kernel, get_device, kernel_time_ns
from xsim_trace.devices.catalog import Catalog
from xsim_trace.devices.spec import DeviceSpec, require_spec
from xsim_trace.errors import GraphError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace
from xsim_trace.plan.model_spec import ModelSpec

log = logging.getLogger(__name__)

_LAYER_NAME = re.compile(r"(?:^|[^a-z])(?:layers?|blocks?)[._\-]?(\d+)(?:[^0-9]|$)", re.IGNORECASE)
_HF_BLOCK = re.compile(r"(?:^|\.)h\.(\d+)(?:\.|$)")  # GPT-2 style "transformer.h.3.attn"
_BWD_NAME = re.compile(r"bwd|backward|grad", re.IGNORECASE)
_PRE_NAME = re.compile(r"embed|wte|tok_emb", re.IGNORECASE)
_POST_NAME = re.compile(r"lm_head|output_layer|head|loss|logits|cross_entropy|final_norm|ln_f", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class OpTemplate:
    name: str
    kind: str  # "comp" or "coll"
    duration_ns: int = 0
    kernel_class: str = "other"
    flops: int = 0
    bytes_accessed: int = 0
    comm_type: CollectiveType = CollectiveType.ALL_REDUCE
    comm_size_bytes: int = 0
    tp_sharded: bool = True  # compute shrinks with TP (GEMMs, attention); False for replicated work


@dataclass(frozen=True, slots=True)
class LayerTemplate:
    fwd: tuple[OpTemplate, ...]
    bwd: tuple[OpTemplate, ...]
    layer: int = -1

    def compute_ns(self) -> int:
        return sum(o.duration_ns for o in self.fwd + self.bwd if o.kind == "comp")


@dataclass(frozen=True, slots=True)
class ModelTemplate:
    layers: tuple[LayerTemplate, ...]
    device_spec: DeviceSpec  # where it was measured (resolved in the run's catalog)
    tp: int  # TP degree it was measured at
    activation_bytes: int  # stage-boundary hidden state of one micro-batch
    layer_grad_bytes: int  # one layer's gradient, unsharded
    pre: LayerTemplate | None = None
    post: LayerTemplate | None = None
    source: str = ""
    pre_grad_bytes: int = 0  # embedding gradient (DP-synchronised on first stages), unsharded
    post_grad_bytes: int = 0  # output-layer gradient (last stages)

    def __post_init__(self) -> None:
        require_spec(self.device_spec, "ModelTemplate.device_spec")

    @property
    def device(self) -> str:
        """The measuring device's canonical catalog name."""
        return self.device_spec.name

    def layer(self, index: int) -> LayerTemplate:
        """Template of model layer ``index``; a trace with fewer layers repeats them cyclically."""
        return self.layers[index % len(self.layers)]


def _op_from_node(n: Node) -> OpTemplate | None:
    if n.type == NodeType.COMP and not n.is_cpu_op:
        kc = n.attr(A.KERNEL_CLASS) or classify_kernel(n.name).value
        return OpTemplate(name=n.name, kind="comp", duration_ns=n.duration_ns, kernel_class=str(kc),
                          flops=int(n.attr(A.NUM_OPS, 0) or n.attr(A.FLOPS, 0) or 0),
                          bytes_accessed=int(n.attr(A.BYTES_ACCESSED, 0) or 0),
                          tp_sharded=kc in (KernelClass.GEMM.value, KernelClass.ATTENTION.value))
    if n.type == NodeType.COMM_COLL:
        kind = str(n.attr(A.COMM_KIND, "tp") or "tp")
        if kind != "tp":
            return None  # DP / PP / reshard traffic is re-planned, not templated
        return OpTemplate(name=n.name, kind="coll", comm_type=n.comm_type or CollectiveType.ALL_REDUCE,
                          comm_size_bytes=n.comm_size_bytes)
    return None


def _layer_of(n: Node) -> int | None:
    v = n.attr(A.LAYER)
    if v is not None:
        return int(v)
    m = _LAYER_NAME.search(n.name) or _HF_BLOCK.search(n.name)
    return int(m.group(1)) if m else None


def _is_bwd(n: Node) -> bool:
    phase = n.attr(A.PHASE)
    if phase is not None:
        return str(phase) == "bwd"
    return bool(_BWD_NAME.search(n.name))


def extract_templates(trace: Trace, *, device: "str | DeviceSpec | None" = None, tp: int | None = None,
                      model: ModelSpec | None = None, catalog: Catalog | None = None) -> ModelTemplate:
    """Templates of the layers in ``trace`` (one rank; nodes in file order; of several micro-batches
    the first is taken).

    ``device`` defaults to the trace's ``device_name`` metadata (a name resolves in ``catalog``, the
    run's device catalog; None = the built-in one), ``tp`` to its ``tp_degree`` metadata (else 1).  Boundary activation and gradient sizes come from ``model`` when given, else
    from the first PP send's size and the trace's DP collectives.
    """
    src = trace.source or "<trace>"
    dev_name = device or trace.metadata.attr(A.META_DEVICE)
    if not dev_name:
        raise GraphError("the trace names no device (device_name metadata); pass the device", file=src)
    dev = get_device(dev_name if isinstance(dev_name, DeviceSpec) else str(dev_name), catalog)
    tp = int(tp or trace.metadata.attr(A.META_TP, 1) or 1)
    fwd: dict[int, list[OpTemplate]] = {}
    bwd: dict[int, list[OpTemplate]] = {}
    pre: tuple[list[OpTemplate], list[OpTemplate]] = ([], [])
    post: tuple[list[OpTemplate], list[OpTemplate]] = ([], [])
    send_bytes = 0
    dp_bytes = 0
    first_mb = min((int(n.attr(A.MICROBATCH)) for n in trace.nodes if n.attr(A.MICROBATCH) is not None), default=None)
    for n in trace.nodes:
        if n.type == NodeType.COMM_SEND and not send_bytes:
            send_bytes = n.comm_size_bytes
        if n.type == NodeType.COMM_COLL and str(n.attr(A.COMM_KIND, "")) == "dp":
            dp_bytes += n.comm_size_bytes
        mb = n.attr(A.MICROBATCH)
        if mb is not None and first_mb is not None and int(mb) != first_mb:
            continue  # one micro-batch is the template; the others repeat it
        op = _op_from_node(n)
        if op is None:
            continue
        layer = _layer_of(n)
        back = _is_bwd(n)
        if layer is not None and layer >= 0:
            (bwd if back else fwd).setdefault(layer, []).append(op)
        elif _PRE_NAME.search(n.name):
            pre[1 if back else 0].append(op)
        elif _POST_NAME.search(n.name):
            post[1 if back else 0].append(op)
    indices = sorted(set(fwd) | set(bwd))
    if not indices:
        raise GraphError("no per-layer nodes found (no 'layer' attribute and no layers.N-style names)", file=src)
    if indices != list(range(indices[0], indices[0] + len(indices))):
        raise GraphError(f"layer indices are not contiguous: {indices[:6]}...", file=src)
    layers = tuple(LayerTemplate(tuple(fwd.get(i, ())), tuple(bwd.get(i, ())), i) for i in indices)
    emb_grad = model.embedding_grad_bytes() if model is not None else 0
    if model is not None:
        act, grad = model.boundary_activation_bytes(), model.layer_grad_bytes()
    else:
        act = send_bytes * tp if send_bytes else 0
        grad = dp_bytes * tp // len(layers) if dp_bytes else 0
        if not act or not grad:
            raise GraphError("cannot tell boundary activation / gradient sizes from the trace; give the model", file=src)
    log.info("templates from %s: %d layers measured on %s at TP %d", src, len(layers), dev.name, tp)
    return ModelTemplate(
        layers=layers, device_spec=dev, tp=tp, activation_bytes=act, layer_grad_bytes=grad,
        pre=LayerTemplate(tuple(pre[0]), tuple(pre[1])) if pre[0] or pre[1] else None,
        post=LayerTemplate(tuple(post[0]), tuple(post[1])) if post[0] or post[1] else None,
        source=src, pre_grad_bytes=emb_grad if pre[0] or pre[1] else 0, post_grad_bytes=emb_grad if post[0] or post[1] else 0,
    )


def _timed(op, dev) -> OpTemplate:
    """An op of :mod:`xsim_trace.workload.ops` as a template, timed by the catalog roofline on
    ``dev`` (a DeviceSpec; one launch overhead per kernel, as the workload generator's timer does)."""
    from xsim_trace.workload.ops import CommOp

    if isinstance(op, CommOp):
        return OpTemplate(name=op.name, kind="coll", comm_type=op.collective, comm_size_bytes=op.size_bytes)
    t = kernel_time_ns(op.kernel_class, op.flops, op.bytes_accessed, dev, include_overhead=False)
    t += op.kernels * dev.kernel_overhead_ns
    return OpTemplate(name=op.name, kind="comp", duration_ns=t, kernel_class=op.kernel_class.value, flops=op.flops,
                      bytes_accessed=op.bytes_accessed, tp_sharded=op.kernel_class.compute_bound)


def templates_from_ops(model: ModelSpec, wmodel, dev, tp: int, source: str) -> ModelTemplate:
    """Templates of one layer (and embedding / head) at TP ``tp``: the workload generator's per-rank
    ops for ``wmodel`` (a :class:`xsim_trace.workload.model.ModelSpec`) timed on ``dev`` (a
    DeviceSpec); sizes (boundary activation, gradients) from the plan geometry ``model``."""
    from xsim_trace.workload.framework import Framework
    from xsim_trace.workload.ops import embedding_backward, embedding_forward, head_backward, head_forward, \
        layer_backward, layer_forward

    mbs = model.micro_batch_size
    ep, etp = model.expert_split(tp)
    fw = Framework(tp=tp, micro_batch=mbs, global_batch=mbs, ep=ep, etp=etp)

    def lt(fwd, bwd, layer: int = -1) -> LayerTemplate:
        return LayerTemplate(tuple(_timed(o, dev) for o in fwd), tuple(_timed(o, dev) for o in bwd), layer)

    emb_grad = model.embedding_grad_bytes()
    # full recompute: a layer's backward first reruns its forward (TP collectives included)
    rerun = layer_forward(wmodel, fw) if model.recompute else []
    return ModelTemplate(
        layers=(lt(layer_forward(wmodel, fw), rerun + layer_backward(wmodel, fw), 0),),
        device_spec=dev, tp=tp, activation_bytes=model.boundary_activation_bytes(),
        layer_grad_bytes=model.layer_grad_bytes(),
        pre=lt(embedding_forward(wmodel, fw), embedding_backward(wmodel, fw)),
        post=lt(head_forward(wmodel, fw), head_backward(wmodel, fw)),
        source=source, pre_grad_bytes=emb_grad, post_grad_bytes=emb_grad,
    )


def templates_from_model(model: ModelSpec, device: "str | DeviceSpec", tp: int = 1) -> ModelTemplate:
    """Templates of one Megatron-style layer (and embedding / head) at TP ``tp`` on ``device`` (a
    resolved DeviceSpec; a name is looked up in the built-in catalog): the workload generator's
    per-rank ops (:mod:`xsim_trace.workload.ops`), timed by the device catalog's roofline.  The TP
    collectives are the generator's (all-reduce without SP)."""
    dev = get_device(device)
    return templates_from_ops(model, model.to_workload(), dev, tp, f"roofline:{model.name or 'model'}@{dev.name}/tp{tp}")


def iter_ops(templates: Iterable[LayerTemplate], back: bool) -> Iterable[OpTemplate]:
    for t in templates:
        yield from (t.bwd if back else t.fwd)
