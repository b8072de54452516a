"""PyTorch Execution Trace (ET) + Kineto -> Chakra.

The Kineto trace gives what ran when (host threads, launches, streams, NCCL kernels); the ET gives
each operator's schema and tensors.  The graph is built from Kineto (``converters.kineto``) and
every host segment and device node is annotated with the ET node of the CPU op that issued it:
``op_schema``, inputs / outputs (values, shapes, types), and the ET ``rf_id``.

Linking an ET node to a Kineto op, in order of trust:
1. ``rf_id`` == Kineto ``Record function id`` (PyTorch >= 2.1);
2. ``rf_id`` == Kineto ``External id`` + k for the offset k in {0, -1, +1} that agrees on most op
   names (older captures), accepting only links whose names agree;
3. the n-th unlinked ET node of a name <-> the n-th unlinked Kineto op of that name.

ET files pair with Kineto files by process id (``pid`` in both), else by the rank in the name.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import ijson

from xsim_trace.errors import FormatError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.model import IOInfo
from xsim_trace.io.json_input import GuardedReader
from xsim_trace.io.kineto import KinetoEvent as Event
from xsim_trace.io.kineto import KinetoTrace
from xsim_trace.io.sources import Source, rank_from_name
from xsim_trace.kineto_names import CPU_CATS

from converters.kineto import Conversion, convert_kineto

log = logging.getLogger(__name__)

ET_RF_ID = "rf_id"  # attribute: the ET node's record-function id (kept for tools that re-link)
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class EtOp:
    id: int
    rf_id: int | None
    name: str
    tid: Any
    op_schema: str
    inputs: IOInfo
    outputs: IOInfo


@dataclass(slots=True)
class EtTrace:
    name: str
    pid: Any
    schema: str
    ops: list[EtOp] = field(default_factory=list)

    @property
    def rank_hint(self) -> int | None:
        return rank_from_name(self.name)


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def read_et_json(stream, name: str) -> EtTrace:
    """Stream an ET JSON (``{"schema": ..., "pid": ..., "nodes": [...]}``) into compact ops."""
    stream = GuardedReader(stream, name)
    header: dict[str, Any] = {}
    trace = EtTrace(name, None, "")
    sink: list[Any] = []
    heads: list[tuple[str, Any]] = []
    nodes_coro = ijson.items_coro(_Sink(sink), "nodes.item", use_float=True)
    kv_coros = [ijson.items_coro(_Sink(heads, key), key, use_float=True) for key in ("schema", "pid")]
    count = 0
    try:
        while True:
            chunk = stream.read(_CHUNK)
            if not chunk:
                break
            nodes_coro.send(chunk)
            for c in kv_coros:
                c.send(chunk)
            for raw in sink:
                trace.ops.append(_et_op(raw, count, name))
                count += 1
            sink.clear()
        nodes_coro.close()
        for c in kv_coros:
            c.close()
        for raw in sink:
            trace.ops.append(_et_op(raw, count, name))
            count += 1
    except UnicodeDecodeError as exc:  # ijson decodes strings as UTF-8 as it goes
        raise FormatError(f"not UTF-8 text ({exc.reason} at byte 0x{exc.object[exc.start]:02x})", file=name) from None
    except ijson.JSONError as exc:
        raise FormatError(f"malformed JSON after ET node {count} ({exc})".replace("\n", " "), file=name, node=count) from None
    header.update(heads)
    if not count:
        raise FormatError("no ET nodes: not a PyTorch Execution Trace JSON", file=name)
    trace.pid = header.get("pid")
    trace.schema = str(header.get("schema", ""))
    return trace


def _et_op(raw: Any, index: int, name: str) -> EtOp:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not isinstance(raw.get("id"), (int, float)):
        raise FormatError(f"ET node {index} is not an object with a name and an id", file=name, node=index)
    # schema >= 1.0.3: rf_id, tid, op_schema ... live in an "attrs" list of {name, type, value}
    extra = {a.get("name"): a.get("value") for a in raw.get("attrs") or () if isinstance(a, dict)}
    rf = raw.get("rf_id", extra.get("rf_id"))
    # schema 1.1: "inputs": {"values", "shapes", "types"}; 1.0: inputs / input_shapes / input_types
    ins, outs = raw.get("inputs"), raw.get("outputs")
    if isinstance(ins, dict):
        inputs = IOInfo(_dump(ins.get("values", [])), _dump(ins.get("shapes", [])), _dump(ins.get("types", [])))
    else:
        inputs = IOInfo(_dump(ins or []), _dump(raw.get("input_shapes", [])), _dump(raw.get("input_types", [])))
    if isinstance(outs, dict):
        outputs = IOInfo(_dump(outs.get("values", [])), _dump(outs.get("shapes", [])), _dump(outs.get("types", [])))
    else:
        outputs = IOInfo(_dump(outs or []), _dump(raw.get("output_shapes", [])), _dump(raw.get("output_types", [])))
    return EtOp(int(raw["id"]), int(rf) if isinstance(rf, (int, float)) else None, raw["name"],
                raw.get("tid", extra.get("tid")), str(raw.get("op_schema", extra.get("op_schema", "")) or ""),
                inputs, outputs)


class _Sink:
    def __init__(self, out: list, key: str | None = None) -> None:
        self.out, self.key = out, key

    def send(self, value: Any) -> None:
        self.out.append((self.key, value) if self.key is not None else value)

    def close(self) -> None:  # pragma: no cover - protocol
        pass


def read_ets(sources: Sequence[Source], on_file: Callable[[str], None] | None = None) -> list[EtTrace]:
    out = []
    for src in sources:
        if on_file is not None:
            on_file(src.name)
        with src.open() as handle:
            out.append(read_et_json(handle, src.name))
    return out


# -- linking -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LinkStats:
    by_rf_id: int
    by_external_id: int
    by_order: int
    et_ops: int
    kineto_ops: int

    @property
    def linked(self) -> int:
        return self.by_rf_id + self.by_external_id + self.by_order


def link(et: EtTrace, kt: KinetoTrace) -> tuple[dict[int, EtOp], LinkStats]:
    """Kineto event index -> ET op, for the CPU ops of ``kt``."""
    ops = [e for e in kt.events if e.cat in CPU_CATS and e.cat != "python_function"]
    if et.pid is not None:
        mine = [e for e in ops if e.pid == et.pid]
        ops = mine or ops
    et_ops = [o for o in et.ops if o.rf_id is not None]
    by_rf = {o.rf_id: o for o in et_ops}
    linked: dict[int, EtOp] = {}
    used: set[int] = set()
    n_rf = n_ext = n_order = 0
    for e in ops:
        if e.record_function_id is not None and e.record_function_id in by_rf and by_rf[e.record_function_id].name == e.name:
            linked[e.index] = by_rf[e.record_function_id]
            used.add(by_rf[e.record_function_id].id)
            n_rf += 1
    rest = [e for e in ops if e.index not in linked and e.external_id is not None]
    if rest:
        def agree(k: int) -> int:
            return sum(1 for e in rest if (o := by_rf.get(e.external_id + k)) is not None and o.name == e.name)  # type: ignore[operator]

        best = max((0, -1, 1), key=lambda k: (agree(k), -abs(k)))
        for k in (best, *(x for x in (0, -1, 1) if x != best)):
            for e in rest:
                if e.index in linked:
                    continue
                o = by_rf.get(e.external_id + k)  # type: ignore[operator]
                if o is not None and o.name == e.name and o.id not in used:
                    linked[e.index] = o
                    used.add(o.id)
                    n_ext += 1
    # by order of occurrence, per name
    queues: dict[str, list[EtOp]] = {}
    for o in sorted(et.ops, key=lambda o: o.id):
        if o.id not in used:
            queues.setdefault(o.name, []).append(o)
    for e in sorted(ops, key=lambda e: (e.ts_ns, -e.end_ns, e.index)):
        if e.index in linked:
            continue
        q = queues.get(e.name)
        if q:
            o = q.pop(0)
            linked[e.index] = o
            used.add(o.id)
            n_order += 1
    return linked, LinkStats(n_rf, n_ext, n_order, len(et.ops), len(ops))


def annotator(linked: dict[int, EtOp]) -> Callable[[Event], tuple[dict[str, Any], IOInfo, IOInfo] | None]:
    def annotate(e: Event) -> tuple[dict[str, Any], IOInfo, IOInfo] | None:
        o = linked.get(e.index)
        if o is None:
            return None
        attrs: dict[str, Any] = {}
        if o.op_schema:
            attrs[A.OP_SCHEMA] = o.op_schema
        if o.rf_id is not None:
            attrs[ET_RF_ID] = o.rf_id
        return attrs, o.inputs, o.outputs

    return annotate


def pair_files(ets: Sequence[EtTrace], kts: Sequence[KinetoTrace]) -> list[tuple[EtTrace, KinetoTrace]]:
    """Pair ET and Kineto files: by pid, else by the rank number in the names, else by position."""
    pairs = []
    free = list(kts)
    for et in ets:
        match = None
        if et.pid is not None:
            cands = [k for k in free if any(e.pid == et.pid for e in k.events[:2000] if e.cat in CPU_CATS)]
            if len(cands) == 1:
                match = cands[0]
        if match is None and et.rank_hint is not None:
            cands = [k for k in free if (k.rank if k.rank is not None else rank_from_name(k.name)) == et.rank_hint]
            if len(cands) == 1:
                match = cands[0]
        if match is None and len(ets) == len(kts) == 1:
            match = free[0]
        if match is None:
            raise FormatError("cannot tell which Kineto file goes with this ET (no matching pid or rank)", file=et.name)
        free.remove(match)
        pairs.append((et, match))
    return pairs


def convert_pytorch(ets: Sequence[EtTrace], kts: Sequence[KinetoTrace], *, step: int | str | None = None,
                    alltoall: str = "p2p") -> Conversion:
    """Kineto conversion of ``kts`` with every node annotated from its linked ET op."""
    annotators = {}
    totals = {"et_linked": 0, "et_ops": 0, "kineto_ops": 0}
    for et, kt in pair_files(ets, kts):
        linked, stats = link(et, kt)
        annotators[kt.name] = annotator(linked)
        totals["et_linked"] += stats.linked
        totals["et_ops"] += stats.et_ops
        totals["kineto_ops"] += stats.kineto_ops
        log.info("%s <-> %s: %d of %d ET ops linked (rf_id %d, external id %d, order %d)", et.name, kt.name,
                 stats.linked, stats.et_ops, stats.by_rf_id, stats.by_external_id, stats.by_order)
    conv = convert_kineto(kts, step=step, alltoall=alltoall, annotators=annotators, source="xsim-convert pytorch")
    conv.stats.update(totals)
    return conv
