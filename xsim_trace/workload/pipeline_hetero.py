"""DeepSpeed pipeline engine (Megatron-DeepSpeed) on a heterogeneous deployment: what one stage holds, whether
DeepSpeed can build it, how much memory one of its GPUs needs, and the 1F1B schedule across stages whose replicas
run at different speeds.

The framework facts (DeepSpeed ``PipelineEngine`` with its fused ``FP16_Optimizer``, Megatron v1.1.5's
``GPT2ModelPipe`` and ``get_params_for_weight_decay_optimization``; the same structure in Sailor's
Megatron-DeepSpeed fork):

- A stage is a contiguous run of pipeline units: word + position embedding, ``L`` transformer blocks, the final
  LayerNorm and the head tied to the word embedding (plus parameter-free units: transposes, the fp32 cast).
- Megatron builds two optimizer parameter groups per stage: weights with weight decay (every parameter of a
  non-LayerNorm module that is not a bias) and parameters without (biases, LayerNorm).  DeepSpeed's fused fp16
  optimizer flattens each group with ``_flatten_dense_tensors``, which fails on an empty group, so a stage holding
  only embeddings / the head (no bias, no LayerNorm) or only parameter-free units cannot start: the run fails
  before its first iteration, whatever the memory (:func:`unbuildable_reason`).
- Memory per GPU (:func:`stage_memory_bytes`): fp16 weights and gradients, the fp32 master copy and its gradient,
  Adam's two fp32 moments (20 B per local parameter), the fp32 copy of a gradient bucket for the fp32 all-reduce;
  activations of the micro-batches 1F1B keeps in flight (``min(stages - stage, micro-batches)``), per block the
  Korthikanti et al. (2022) bytes without sequence parallelism or recompute (``34 + 5 a s / h`` bytes per token
  and hidden unit, the attention part divided by TP; ``s^2`` scores only when attention is not fused); on the head
  stage the fp32 logits and one fp16 copy of them.
- 1F1B (:func:`schedule_1f1b`): each stage executes DeepSpeed's ``TrainSchedule`` instruction stream
  (:func:`train_schedule`) in order, each replica its own pass times.  Stage-to-stage transfers are blocking NCCL
  point-to-point operations (``runtime/pipe/p2p.py``: ``dist.send`` / ``dist.recv``, a two-rank broadcast before
  torch 1.8; every exchange instruction documents "blocking, must be paired"): a send completes only when the peer
  reaches its matching receive, and the wire time holds both ranks, so in the steady state a stage's cycle is its
  forward + backward plus both of its transfers.

This module holds the model only; xsim_trace.validate.hetero_predict feeds it measured-run deployments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from xsim_trace.errors import GraphError

#: bytes per local parameter of the fp16 mixed-precision state: fp16 weight (2) + fp16 gradient (2) + fp32 master
#: weight (4) + its fp32 gradient (4) + Adam momentum and variance (8)
STATE_BYTES_PER_PARAM = 20
#: bytes per local parameter the fp16 optimizer step reads and writes: overflow check (2) + unscale and norm of the
#: fp32 gradient (4 + 4) + Adam on master, momentum, variance (read p, g, m, v, write p, m, v: 28) + fp16 copy (2 + 4)
OPTIMIZER_BYTES_PER_PARAM = 44
#: DeepSpeed's gradient all-reduce bucket (elements), copied to fp32 when ``fp32_allreduce`` is set
ALLREDUCE_BUCKET_ELEMENTS = 500_000_000


@dataclass(frozen=True, slots=True)
class StageContent:
    """The pipeline units one stage holds."""

    blocks: int
    embedding: bool
    final_norm: bool
    head: bool


@dataclass(frozen=True, slots=True)
class BlockDims:
    hidden: int
    ffn: int
    heads: int
    vocab: int
    seq_len: int


def block_params(d: BlockDims) -> int:
    """One GPT-2 / OPT block: QKV + projection with biases, two LayerNorms, the MLP with biases."""
    h, f = d.hidden, d.ffn
    return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h


def stage_params(d: BlockDims, st: StageContent, tied_head: bool = True) -> int:
    """Parameters one stage holds.  A head tied to the word embedding (``TiedLayerSpec``) is a copy of the whole
    EmbeddingPipe on the last stage, but DeepSpeed builds a tied module once per stage, so a stage holding both
    the embedding and the head (a one-stage pipeline) has one copy; an untied head (``tied_head=False``, Sailor's
    OPT ``lm_head``) is its own vocab x hidden matrix."""
    params = st.blocks * block_params(d)
    if st.embedding:
        params += d.vocab * d.hidden + d.seq_len * d.hidden
    if st.final_norm:
        params += 2 * d.hidden
    if st.head and not tied_head:
        params += d.vocab * d.hidden
    elif st.head and not st.embedding:
        params += d.vocab * d.hidden + d.seq_len * d.hidden
    return params


def param_groups(d: BlockDims, st: StageContent) -> tuple[int, int]:
    """(with weight decay, without) parameter counts of Megatron's two optimizer groups on this stage."""
    h, f = d.hidden, d.ffn
    decay = st.blocks * (4 * h * h + 2 * h * f)
    no_decay = st.blocks * (4 * h + f + h + 4 * h)
    if st.embedding:
        decay += d.vocab * h + d.seq_len * h
    if st.head:
        decay += d.vocab * h + d.seq_len * h
    if st.final_norm:
        no_decay += 2 * h
    return decay, no_decay


def unbuildable_reason(d: BlockDims, st: StageContent) -> str:
    """Why DeepSpeed's fused fp16 optimizer cannot be built on this stage ("" when it can)."""
    decay, no_decay = param_groups(d, st)
    if decay and no_decay:
        return ""
    missing = " and ".join(n for n, v in (("weight-decay", decay), ("no-decay", no_decay)) if not v)
    return f"empty {missing} parameter group (DeepSpeed's fp16 optimizer cannot flatten an empty group)"


def layer_activation_bytes(d: BlockDims, micro_batch: int, tp: int, fused_attention: bool = False) -> float:
    """Activation bytes one block keeps for its backward (Korthikanti et al. 2022, no sequence parallelism)."""
    s, b, h, a = d.seq_len, micro_batch, d.hidden, d.heads
    scores = 0.0 if fused_attention else 5 * a * s / (h * tp)
    return s * b * h * (10 + 24 / tp + scores)


def stage_memory_bytes(d: BlockDims, st: StageContent, stage: int, stages: int, micro_batch: int,
                       micro_batches: int, tp: int, fused_attention: bool = False) -> float:
    """Bytes one GPU of a stage replica needs (without the CUDA context / workspace reserve)."""
    params = stage_params(d, st) / tp
    state = params * STATE_BYTES_PER_PARAM + min(params, ALLREDUCE_BUCKET_ELEMENTS) * 4
    in_flight = min(stages - stage, micro_batches)
    s, b, h = d.seq_len, micro_batch, d.hidden
    act = layer_activation_bytes(d, micro_batch, tp, fused_attention) * st.blocks * in_flight
    if st.embedding:
        act += s * b * h * 2 * in_flight
    if st.head:  # fp32 logits (kept as the softmax, its gradient computed in place) + one fp16 copy: the fp16
        # logits while they are cast in the forward, the gradient's fp16 copy in the backward
        act += s * b * d.vocab / tp * (4 + 2)
    return state + act


class ExchangeOrder(str, Enum):
    """The order of the two exchanges in one ``TrainSchedule`` step (DeepSpeed's ``runtime/pipe/schedule.py``).

    ``ACTIVATION_FIRST`` (DeepSpeed up to early 2023, e.g. AMP's 0.3): a forward step runs RecvActivation of its
    micro-batch, then SendGrad of the previous step's; a backward step SendActivation of the previous step's, then
    RecvGrad.  ``GRADIENT_FIRST`` (the fix of deepspeedai/DeepSpeed issue #2800, 2023: send before receive, so a
    receive no longer overwrites a buffer whose gradient is still to be sent; Sailor's 2024 engine runs on it): a
    forward step sends the previous gradient, then receives the activation; a backward step receives the gradient,
    then sends the previous activation, so a stage's activation leaves only after the gradient it waits for came."""

    ACTIVATION_FIRST = "activation_first"
    GRADIENT_FIRST = "gradient_first"


def train_schedule(stage: int, p: int, m: int,
                   order: ExchangeOrder = ExchangeOrder.ACTIVATION_FIRST) -> list[tuple[str, int]]:
    """DeepSpeed ``TrainSchedule``'s instruction stream of one stage, communication and compute only:
    ("recv_act" | "send_grad" | "fwd" | "send_act" | "recv_grad" | "bwd", micro-batch).  Each of the
    ``2 (m + p - 1)`` steps runs its exchanges first, in ``order`` (:class:`ExchangeOrder`), then its pass."""
    out: list[tuple[str, int]] = []
    prev = -1
    for step in range(2 * (m + p - 1)):
        forward = step % 2 == stage % 2
        if forward:
            mb = step // 2 - stage // 2
        elif step % 2 == 0:  # odd stage
            mb = step // 2 - p + (stage + 1) // 2
        else:  # even stage
            mb = step // 2 - p + 1 + stage // 2
        cur_ok, prev_ok = 0 <= mb < m, 0 <= prev < m
        exchanges = []
        if forward:
            if stage > 0 and cur_ok:
                exchanges.append(("recv_act", mb))
            if stage > 0 and prev_ok:
                exchanges.append(("send_grad", prev))
        else:
            if stage < p - 1 and prev_ok:
                exchanges.append(("send_act", prev))
            if stage < p - 1 and cur_ok:
                exchanges.append(("recv_grad", mb))
        if order is ExchangeOrder.GRADIENT_FIRST:
            exchanges.reverse()
        out += exchanges
        if cur_ok:
            out.append(("fwd" if forward else "bwd", mb))
        prev = mb
    return out


class SocketPorts:
    """Eager transfers in flight between pipeline stages over TCP sockets.

    Messages from one stage to one peer travel on one NCCL connection, in order (first in, first out).  The
    connections that share a NIC port (a stage's outgoing port carries its activations forward and its gradients
    back; its incoming port the reverse) are separate TCP flows, which share the port fairly: the head message of
    each connection runs at ``1 / k`` of its full rate, ``k`` the most connections active on either of its two
    ports (the sender's outgoing, the receiver's incoming), recomputed whenever a message starts or ends.  A
    message's ``wire`` is its time alone on both ports.  :attr:`arrival` holds, per message, when its last byte is
    in: final for the messages that are done, projected (no later message assumed) for those in flight; a
    projection can only move while no instruction has run past it (instructions run in time order)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.queues: dict[tuple[int, int], list[tuple[tuple, float]]] = {}  # (sender, receiver) -> [(key, wire)]
        self.left: dict[tuple[int, int], float] = {}  # each busy connection's head: wire time still to go
        self.arrival: dict[tuple, int] = {}

    @staticmethod
    def _rates(left: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
        out: dict[int, int] = {}
        inn: dict[int, int] = {}
        for a, b in left:
            out[a] = out.get(a, 0) + 1
            inn[b] = inn.get(b, 0) + 1
        return {c: 1.0 / max(out[c[0]], inn[c[1]]) for c in left}

    @classmethod
    def _run(cls, now: float, queues: dict, left: dict, until: float | None, done: dict) -> float:
        """Advance the fluid model from ``now`` to ``until`` (None: until every message is in), recording each
        finished message's arrival in ``done``; ``queues`` and ``left`` are updated in place."""
        while left:
            rates = cls._rates(left)
            conn = min(left, key=lambda c: (now + left[c] / rates[c], c))
            finish = now + left[conn] / rates[conn]
            if until is not None and finish > until:
                break
            for c in left:
                left[c] -= (finish - now) * rates[c]
            now = finish
            key, _ = queues[conn].pop(0)
            done[key] = math.ceil(finish - 1e-6)
            del left[conn]
            if queues[conn]:
                left[conn] = queues[conn][0][1]
        if until is not None and until > now:
            if left:
                rates = cls._rates(left)
                for c in left:
                    left[c] -= (until - now) * rates[c]
            now = until
        return now

    def send(self, key: tuple, at: int, wire: int, sender: int, receiver: int) -> None:
        """A message of ``wire`` ns issued at ``at`` (not before any earlier call's ``at``)."""
        self.now = self._run(self.now, self.queues, self.left, float(at), self.arrival)
        conn = (sender, receiver)
        self.queues.setdefault(conn, []).append((key, float(wire)))
        if conn not in self.left:
            self.left[conn] = float(wire)
        # project every message still in flight, as if no other message came
        queues = {c: list(q) for c, q in self.queues.items()}
        self._run(self.now, queues, dict(self.left), None, self.arrival)


#: the receive that completes each send, and the stage it runs on (relative to the sender)
_MATCH = {"send_act": ("recv_act", 1), "send_grad": ("recv_grad", -1)}
#: the send each receive waits for, and the stage it runs on (relative to the receiver)
_SOURCE = {"recv_act": ("send_act", -1), "recv_grad": ("send_grad", 1)}


def schedule_1f1b(fwd: list[int], bwd: list[int], p2p: list[int], m: int,
                  p2p_bwd: list[int] | None = None, order: ExchangeOrder = ExchangeOrder.ACTIVATION_FIRST,
                  eager_act: list[bool] | None = None, eager_grad: list[bool] | None = None,
                  fair_share: bool = True) -> list[int]:
    """DeepSpeed ``TrainSchedule`` (1F1B) on one pipeline replica: per stage, the time it finishes its instruction
    stream (its last backward and, on stages after the first, the send of that backward's gradient), i.e. when it
    reaches ``ReduceGrads``.  ``fwd[s]`` / ``bwd[s]`` are stage s's pass times, ``p2p[s]`` the activation transfer
    from stage s to s + 1 and ``p2p_bwd[s]`` the gradient's way back (default: the same).

    DeepSpeed's stage-to-stage transfers are blocking NCCL point-to-point operations (``dist.send`` / ``dist.recv``
    in ``runtime/pipe/p2p.py``, a two-rank ``dist.broadcast`` before torch 1.8).  By default a send completes only
    once the peer has reached the matching receive in its own stream (rendezvous), and the transfer holds both
    ranks.  Where ``eager_act[s]`` / ``eager_grad[s]`` is set, that link's send is *eager*: NCCL's sender hands the
    message to its staging buffer and the TCP socket without waiting for the receiver (the socket transport has no
    receiver handshake; the message fits the buffers), so the sender goes on at once, the bytes leave when the
    sender's outgoing and the receiver's incoming port are free, and the receive completes at their arrival.
    Instructions run in time order (the earliest ready instruction of any stage first).  Messages to one peer go
    in order over one connection; with ``fair_share`` (TCP: each connection a flow) the connections sharing a NIC
    port split its rate evenly (:class:`SocketPorts`), without it the ports serve the transfers first come,
    first served (each whole message at the full rate, one after the other)."""
    back = p2p if p2p_bwd is None else p2p_bwd
    p = len(fwd)
    eager = {"send_act": list(eager_act or [False] * max(0, p - 1)),
             "send_grad": list(eager_grad or [False] * max(0, p - 1))}
    streams = [train_schedule(s, p, m, order) for s in range(p)]
    clock = [0] * p
    pos = [0] * p
    port_out = [0] * p  # when each stage's outgoing port is free (eager transfers)
    port_in = [0] * p
    sockets = SocketPorts()
    # (send kind, micro-batch, sender) -> when the bytes are in (projected while they travel, with fair sharing)
    arrival: dict[tuple[str, int, int], int] = sockets.arrival if fair_share else {}
    remaining = sum(len(x) for x in streams)

    def link(kind: str, sender: int) -> int:  # index of the stage boundary a send crosses
        return sender if kind == "send_act" else sender - 1

    def ready(s: int) -> int | None:
        """When stage s's next instruction can start; None while it waits for a peer."""
        kind, mb = streams[s][pos[s]]
        if kind in ("fwd", "bwd"):
            return clock[s]
        if kind in _MATCH:
            if eager[kind][link(kind, s)]:
                return clock[s]
            want, step = _MATCH[kind]
            peer = s + step
            if pos[peer] < len(streams[peer]) and streams[peer][pos[peer]] == (want, mb):
                return max(clock[s], clock[peer])
            return None
        src_kind, step = _SOURCE[kind]
        if not eager[src_kind][link(src_kind, s + step)]:
            return None  # a rendezvous receive runs with its send
        key = (src_kind, mb, s + step)
        return max(clock[s], arrival[key]) if key in arrival else None

    while remaining:
        best, start = -1, 0
        for s in range(p):
            if pos[s] < len(streams[s]):
                t = ready(s)
                if t is not None and (best < 0 or t < start):
                    best, start = s, t
        if best < 0:  # cannot happen for DeepSpeed's orders; a guard against an endless loop
            raise GraphError(f"1F1B instruction streams deadlocked with {remaining} instructions left")
        s = best
        kind, mb = streams[s][pos[s]]
        pos[s] += 1
        remaining -= 1
        if kind in ("fwd", "bwd"):
            clock[s] = start + (fwd[s] if kind == "fwd" else bwd[s])
        elif kind in _MATCH:
            peer = s + _MATCH[kind][1]
            wire = p2p[s] if kind == "send_act" else back[peer]
            if eager[kind][link(kind, s)]:
                if fair_share:
                    sockets.send((kind, mb, s), start, wire, s, peer)
                else:
                    begin = max(start, port_out[s], port_in[peer])
                    port_out[s] = port_in[peer] = arrival[(kind, mb, s)] = begin + wire
                clock[s] = start
            else:
                clock[s] = clock[peer] = start + wire
                pos[peer] += 1
                remaining -= 1
        else:
            clock[s] = start
    return clock


def program_stages(program) -> list[StageContent]:
    """The stage contents of a generator :class:`~xsim_trace.workload.program.Program` (chunk 0 of each stage; the
    final LayerNorm sits with the head)."""
    out = []
    for stage in range(program.fw.pp):
        c = program.chunks[(stage, 0)]
        out.append(StageContent(blocks=c.layers, embedding=c.has_embedding, final_norm=c.has_head, head=c.has_head))
    return out


def deepspeed_check(program, capacity_bytes: float) -> list[dict]:
    """Per stage, DeepSpeed's view of a generator program (what ``xsim estimate --framework deepspeed`` reports
    next to the Megatron memory model): whether the fused fp16 optimizer can be built, and the fp16 pipeline
    memory of one GPU against ``capacity_bytes`` (no reserve)."""
    m, fw = program.model, program.fw
    dims = BlockDims(hidden=m.hidden, ffn=m.ffn, heads=m.heads, vocab=m.vocab, seq_len=m.seq_len)
    micro_batches = fw.global_batch // (fw.micro_batch * fw.dp)
    out = []
    for s, st in enumerate(program_stages(program)):
        need = stage_memory_bytes(dims, st, s, fw.pp, fw.micro_batch, micro_batches, fw.tp,
                                  fused_attention=bool(m.flash_attention))
        out.append({"stage": s, "unbuildable": unbuildable_reason(dims, st), "memory_GiB": round(need / 2**30, 2),
                    "out_of_memory": need > capacity_bytes})
    return out


__all__ = ["ALLREDUCE_BUCKET_ELEMENTS", "BlockDims", "OPTIMIZER_BYTES_PER_PARAM", "STATE_BYTES_PER_PARAM",
           "SocketPorts", "StageContent", "block_params", "deepspeed_check", "layer_activation_bytes", "param_groups",
           "program_stages", "schedule_1f1b", "stage_memory_bytes", "stage_params", "train_schedule", "unbuildable_reason"]
