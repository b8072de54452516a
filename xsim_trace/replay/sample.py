"""A small synthetic multi-rank training step for the demo and the benchmarks.

``tp_dp_step``: ranks = tp * dp; each rank runs ``layers`` transformer-like layers forward (two
GEMM blocks, each followed by a TP all-reduce on the TP comm stream) and backward (the same in
reverse, with twice the compute), and all-reduces each layer's gradients over its DP group on a
separate comm stream, overlapping the rest of the backward pass.  Compute on stream 0, TP comm on
stream 1, DP comm on stream 2.  Node times are exact ``duration_ns`` attributes.
"""

from __future__ import annotations

from xsim_trace.graph import attrs as A
from xsim_trace.graph.kinds import CollectiveType, NodeType
from xsim_trace.graph.model import Node, Trace, make_metadata, make_node

COMPUTE_STREAM, TP_STREAM, DP_STREAM = 0, 1, 2


def tp_group_id(d: int) -> str:
    """Comm-group id of the TP group of DP index ``d``: "1" .. "dp" (ids are integers from 1, as
    ASTRA-sim reads them)."""
    return str(d + 1)


def dp_group_id(t: int, dp: int) -> str:
    """Comm-group id of the DP group of TP index ``t``: after the TP groups."""
    return str(dp + t + 1)


def tp_dp_groups(tp: int, dp: int) -> dict[str, tuple[int, ...]]:
    groups: dict[str, tuple[int, ...]] = {}
    for d in range(dp):
        groups[tp_group_id(d)] = tuple(d * tp + t for t in range(tp))
    for t in range(tp):
        groups[dp_group_id(t, dp)] = tuple(d * tp + t for d in range(dp))
    return groups


def tp_dp_step(
    tp: int = 8,
    dp: int = 2,
    layers: int = 4,
    *,
    gemm_ns: int = 400_000,
    tp_bytes: int = 16 << 20,
    grad_bytes: int = 64 << 20,
    slow_rank: int | None = None,
    slow_factor: float = 1.0,
) -> tuple[dict[int, Trace], dict[str, tuple[int, ...]]]:
    """Per-rank traces and comm groups of one training step (see the module docstring)."""
    traces: dict[int, Trace] = {}
    groups = tp_dp_groups(tp, dp)
    attr_cache: dict[tuple, tuple] = {}
    for rank in range(tp * dp):
        d, t = divmod(rank, tp)
        scale = slow_factor if rank == slow_rank else 1.0
        nodes: list[Node] = []
        last = None

        def add(name: str, ntype: NodeType, deps, **attrs) -> int:
            nid = len(nodes)
            dur = attrs.pop("dur", 0)
            if dur:
                attrs[A.DURATION_NS] = dur
            key = tuple(sorted(attrs.items()))
            attr_tuple = attr_cache.get(key)
            if attr_tuple is None:  # nodes of a kind share their (immutable) attributes
                attr_tuple = attr_cache[key] = make_node(0, "", ntype, **attrs).attrs
            nodes.append(Node(id=nid, name=name, type=ntype, data_deps=tuple(x for x in deps if x is not None),
                              duration_micros=dur // 1000, attrs=attr_tuple))
            return nid

        def gemm(name: str, deps, factor: float) -> int:
            return add(name, NodeType.COMP, deps, dur=int(gemm_ns * factor * scale), stream=COMPUTE_STREAM, kernel_class="gemm")

        def tp_ar(name: str, deps) -> int:
            return add(
                name, NodeType.COMM_COLL, deps, comm_type=int(CollectiveType.ALL_REDUCE), comm_size=tp_bytes,
                pg_name=tp_group_id(d), comm_kind="tp", stream=TP_STREAM,
            )

        for layer in range(layers):
            for block in ("attn", "mlp"):
                last = gemm(f"fwd.l{layer}.{block}", [last], 1.0)
                last = tp_ar(f"fwd.l{layer}.{block}.tp_allreduce", [last])
        grad_syncs = []
        for layer in reversed(range(layers)):
            for block in ("mlp", "attn"):
                last = gemm(f"bwd.l{layer}.{block}", [last], 2.0)
                last = tp_ar(f"bwd.l{layer}.{block}.tp_allreduce", [last])
            grad_syncs.append(
                add(
                    f"bwd.l{layer}.dp_allreduce", NodeType.COMM_COLL, [last], comm_type=int(CollectiveType.ALL_REDUCE),
                    comm_size=grad_bytes, pg_name=dp_group_id(t, dp), comm_kind="dp", stream=DP_STREAM,
                )
            )
        add("optimizer.step", NodeType.COMP, [last, *grad_syncs], dur=int(gemm_ns * 0.5 * scale), stream=COMPUTE_STREAM)
        traces[rank] = Trace(make_metadata(rank=rank, world_size=tp * dp, source="xsim sample tp_dp_step"), tuple(nodes), rank=rank)
    return traces, groups
