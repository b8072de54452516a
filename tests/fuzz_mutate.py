"""Hypothesis strategies that turn a seed file into a hostile one: byte-level damage (bit flips,
truncation, junk, non-UTF-8, corrupt gzip, varint runs) and structured damage (a value anywhere in
a JSON / YAML document, an .et node field or attribute, a text token replaced by a hostile value;
deep nesting)."""

from __future__ import annotations

import copy
import gzip
import io
import json
import math
import re

import yaml
from hypothesis import strategies as st

#: values the fuzzer of issue 15 found crashes with, and their neighbours
HOSTILE = [
    0, -1, 1, 2, 7, 2**15, 2**31, 2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30,
    1.5, -0.0, 1e308, -1e308, 1e-300, math.inf, -math.inf, math.nan,
    "", "x", "0", "-1", "1e400", "nan", "inf", "ALL_REDUCE", "[0, 1]", "\u00e9\u4e2d", "a" * 300,
    [], [1], [1, 2, 3], ["a"], [[1]], {}, {"a": 1}, {"kind": "x"}, None, True, False,
]
_DEEP_MARK = "@@deep@@"
_DEEP_RE = re.compile(r"""['"]?@@deep@@(\d+)['"]?""")


def _expand_deep(text: str) -> str:
    """Each deep marker becomes that many nested empty lists."""
    return _DEEP_RE.sub(lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)


@st.composite
def hostile_value(draw):
    if draw(st.integers(0, 19)) == 0:
        return _DEEP_MARK + str(draw(st.sampled_from([300, 3000, 30000])))
    if draw(st.booleans()):
        return copy.deepcopy(draw(st.sampled_from(HOSTILE)))  # mutations reach into it: never share
    return draw(st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                          st.text(max_size=20)))


# -- bytes -------------------------------------------------------------------------------------------
@st.composite
def damage_bytes(draw, data: bytes) -> bytes:
    b = bytearray(data)
    op = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "duplicate", "ff", "gzip"]))
    if not b:
        return bytes(draw(st.binary(max_size=64)))
    at = draw(st.integers(0, len(b) - 1))
    if op == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(b) - 1))
            b[i] ^= 1 << draw(st.integers(0, 7))
    elif op == "truncate":
        del b[at:]
    elif op == "insert":
        b[at:at] = draw(st.binary(min_size=1, max_size=32))
    elif op == "delete":
        del b[at:at + draw(st.integers(1, 64))]
    elif op == "duplicate":
        n = draw(st.integers(1, 256))
        b[at:at] = b[at:at + n] * draw(st.integers(1, 20))
    elif op == "ff":  # a run of varint continuation bytes / invalid UTF-8
        b[at:at] = b"\xff" * draw(st.integers(1, 12))
    else:  # gzip the whole file, then damage the compressed stream
        z = bytearray(gzip.compress(bytes(b), mtime=0))
        i = draw(st.integers(0, len(z) - 1))
        z[i] ^= 1 << draw(st.integers(0, 7))
        if draw(st.booleans()):
            del z[draw(st.integers(10, max(10, len(z) - 1))):]
        return bytes(z)
    return bytes(b)


# -- structured --------------------------------------------------------------------------------------
def _paths(doc, prefix=(), out=None, limit=400):
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    out.append(prefix)
    if isinstance(doc, dict):
        for k in list(doc)[:40]:
            _paths(doc[k], prefix + (k,), out, limit)
    elif isinstance(doc, list):
        for i in range(min(len(doc), 40)):
            _paths(doc[i], prefix + (i,), out, limit)
    return out


def _set(doc, path, value):
    if not path:
        return value
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


_DELETE = object()


@st.composite
def damage_tree(draw, doc):
    """One to three values of a parsed document replaced (or deleted), anywhere in it."""
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        value = _DELETE if path and draw(st.integers(0, 9)) == 0 else draw(hostile_value())
        doc = _set(doc, path, value)
    return doc


@st.composite
def mutate_json(draw, data: bytes) -> bytes:
    doc = json.loads(data)
    doc = draw(damage_tree(doc))
    return _expand_deep(json.dumps(doc, allow_nan=True)).encode()


@st.composite
def mutate_yaml(draw, data: bytes) -> bytes:
    doc = yaml.safe_load(data)
    doc = draw(damage_tree(doc))
    return _expand_deep(yaml.safe_dump(doc, allow_unicode=True, width=10**6)).encode()


@st.composite
def mutate_text(draw, data: bytes) -> bytes:
    lines = data.decode("utf-8", "replace").split("\n")
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        tokens = lines[i].split()
        value = draw(hostile_value())
        token = _expand_deep(str(value))[:100000] if isinstance(value, str) else str(value)[:40]
        if tokens and draw(st.booleans()):
            tokens[draw(st.integers(0, len(tokens) - 1))] = token
        else:
            tokens.insert(draw(st.integers(0, len(tokens))), token)
        lines[i] = " ".join(tokens) if draw(st.booleans()) else "\t".join(tokens)
    return "\n".join(lines).encode()


@st.composite
def mutate_et(draw, data: bytes) -> bytes:
    """An .et node field or attribute set to a hostile value of a random wire kind, a dependency list
    damaged (dangling, self, cyclic) or a node dropped."""
    from dataclasses import replace

    from xsim_trace.graph import attrs as A
    from xsim_trace.graph.model import Trace
    from xsim_trace.io import read_et, write_et

    trace = read_et(io.BytesIO(data))
    nodes = list(trace.nodes)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(nodes) - 1))
        node = nodes[i]
        what = draw(st.sampled_from(["id", "duration_micros", "type", "deps", "ctrl_deps", "drop", "attr", "attr", "attr"]))
        if what == "id":
            nodes[i] = replace(node, id=draw(st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1, node.id + 1])))
        elif what == "duration_micros":
            nodes[i] = replace(node, duration_micros=draw(st.sampled_from([0, 1, 2**53, 2**63 // 1000 + 1, 2**64 - 1])))
        elif what == "type":
            nodes[i] = replace(node, type=draw(st.integers(0, 12)))
        elif what in ("deps", "ctrl_deps"):  # dangling, self and cyclic dependencies among them
            ids = [n.id for n in nodes] + [2**63 - 1, 99999, 2**64 - 1]
            deps = tuple(draw(st.lists(st.sampled_from(ids), max_size=4)))
            nodes[i] = replace(node, data_deps=deps) if what == "deps" else replace(node, ctrl_deps=deps)
        elif what == "drop" and len(nodes) > 1:  # its dependants now name a node not in the file
            del nodes[i]
        else:
            name = draw(st.sampled_from([A.COMM_TYPE, A.COMM_SIZE, A.COMM_SRC, A.COMM_DST, A.COMM_TAG, A.STREAM,
                                         A.THREAD, A.DURATION_NS, A.COMM_ROOT, A.RING_ORDER, A.PG_NAME, A.IS_CPU_OP,
                                         A.COMM_KIND]))
            attr = draw(_wire_attr(name))
            if attr is not None:
                nodes[i] = replace(node, attrs=tuple(a for a in node.attrs if a.name != name) + (attr,))
    buf = io.BytesIO()
    try:
        write_et(buf, Trace(trace.metadata, tuple(nodes), rank=0))
    except Exception:  # the value does not fit its wire kind: keep the file unchanged
        return data
    return buf.getvalue()


@st.composite
def _wire_attr(draw, name):
    from xsim_trace.graph.kinds import AttrKind
    from xsim_trace.graph.model import Attr

    kind = draw(st.sampled_from([AttrKind.INT64, AttrKind.UINT64, AttrKind.INT32, AttrKind.DOUBLE, AttrKind.STRING,
                                 AttrKind.BOOL, AttrKind.INT64_LIST, AttrKind.STRING_LIST, AttrKind.NONE]))
    if kind is AttrKind.NONE:
        return Attr(name, kind, None)
    if kind in (AttrKind.INT64, AttrKind.INT32, AttrKind.UINT64):
        lo, hi = {AttrKind.INT64: (-(2**63), 2**63 - 1), AttrKind.INT32: (-(2**31), 2**31 - 1),
                  AttrKind.UINT64: (0, 2**64 - 1)}[kind]
        value = draw(st.one_of(st.sampled_from([lo, hi, 0, 1, -1 if lo < 0 else 2, 2**31, 7]), st.integers(lo, hi)))
        return Attr(name, kind, value)
    if kind is AttrKind.DOUBLE:
        return Attr(name, kind, draw(st.floats(allow_nan=True, allow_infinity=True)))
    if kind is AttrKind.STRING:
        return Attr(name, kind, draw(st.sampled_from(["", "x", "0", "1e400", "7"])))
    if kind is AttrKind.BOOL:
        return Attr(name, kind, draw(st.booleans()))
    if kind is AttrKind.INT64_LIST:
        return Attr(name, kind, tuple(draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4))))
    return Attr(name, kind, tuple(draw(st.lists(st.text(max_size=3), max_size=3))))


@st.composite
def hostile_file(draw, syntax: str, data: bytes) -> bytes:
    """A damaged copy of ``data``: structured damage for its syntax, or byte-level damage."""
    structured = {"json": mutate_json, "yaml": mutate_yaml, "text": mutate_text, "et": mutate_et}[syntax]
    if draw(st.integers(0, 2)) > 0:
        zipped = data[:2] == b"\x1f\x8b"
        data = draw(structured(gzip.decompress(data) if zipped else data))
        data = gzip.compress(data, mtime=0) if zipped else data
        if draw(st.integers(0, 4)) == 0:
            data = draw(damage_bytes(data))
        return data
    return draw(damage_bytes(data))
