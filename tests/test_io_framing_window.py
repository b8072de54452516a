"""io.framing's chunked window: records that straddle chunk boundaries (a prefix or a payload cut by
the end of a chunk) read back whole, and the errors name the same offsets at every chunk size."""

from __future__ import annotations

import io

import pytest

import xsim_trace.io.framing as framing
from xsim_trace.errors import FormatError

RECORDS = [b"", b"a", bytes(range(200)), b"xyz" * 50, bytes(130)]  # 130+ bytes: a two-byte prefix
DATA = b"".join(framing.frame(r) for r in RECORDS)


def _read(data: bytes, chunk: int, monkeypatch) -> list[tuple[int, bytes]]:
    monkeypatch.setattr(framing, "CHUNK_BYTES", chunk)
    return list(framing.iter_records(io.BytesIO(data), "f.et"))


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 22])
def test_records_across_chunks_read_back_whole(chunk, monkeypatch):
    got = _read(DATA, chunk, monkeypatch)
    assert [p for _, p in got] == RECORDS
    offsets = [0]
    for r in RECORDS[:-1]:
        offsets.append(offsets[-1] + len(framing.frame(r)))
    assert [o for o, _ in got] == offsets


@pytest.mark.parametrize("chunk", [1, 3, 1 << 22])
def test_truncations_name_the_record_start_at_every_chunk_size(chunk, monkeypatch):
    last = len(DATA) - len(framing.frame(RECORDS[-1]))
    with pytest.raises(FormatError, match=rf"offset {last}: truncated record: needs 130 bytes, file has 9 left"):
        _read(DATA[:-121], chunk, monkeypatch)
    with pytest.raises(FormatError, match=rf"offset {last}: truncated record: file ends inside a length prefix"):
        _read(DATA[:last + 1], chunk, monkeypatch)
    with pytest.raises(FormatError, match=r"offset 0: corrupt record: length prefix longer than 5 bytes"):
        _read(b"\xff" * 6, chunk, monkeypatch)
    with pytest.raises(FormatError, match=r"offset 0: corrupt record: implausible length"):
        _read(framing.encode_varint(framing.MAX_RECORD_BYTES + 1), chunk, monkeypatch)
