"""The boundary of every JSON input read in a stream (Kineto, PyTorch ET): a reader that turns
decompression and read errors into :class:`FormatError` and refuses nesting deeper than
:data:`MAX_JSON_DEPTH` before the parser sees it, and the number rules of trace timestamps.

The streaming JSON parser keeps the path of the current value as a string, so its cost grows with
the square of the nesting depth (10,000 levels took 7 s, 100,000 ran out of memory).  The depth
scan is exact (brackets inside strings do not count, escaped quotes are handled across chunk
boundaries) and vectorised: a few numpy passes over each chunk.
"""

from __future__ import annotations

import gzip
import math
import zlib
from decimal import Decimal
from typing import IO, Any

import numpy as np

from xsim_trace.errors import FormatError

#: Kineto and PyTorch ET nest about 6 levels; anything past this is not a trace
MAX_JSON_DEPTH = 256
#: timestamps and durations in ns must fit int64 with room to add them up (2^62 ns: 146 years)
MAX_TIME_NS = 1 << 62

_QUOTE, _BACKSLASH = 0x22, 0x5C
_DELTA = np.zeros(256, np.int8)
_DELTA[[0x5B, 0x7B]] = 1  # [ {
_DELTA[[0x5D, 0x7D]] = -1  # ] }
_DECOMPRESS_ERRORS = (zlib.error, gzip.BadGzipFile, EOFError)


class DepthGuard:
    """Tracks the nesting depth of a JSON text fed in chunks; raises FormatError past ``limit``."""

    def __init__(self, name: str, limit: int = MAX_JSON_DEPTH) -> None:
        self.name, self.limit = name, limit
        self.depth = 0
        self.in_string = False
        self.trailing_backslashes = 0  # at the end of the previous chunk
        self.offset = 0

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        a = np.frombuffer(chunk, np.uint8)
        delta = _DELTA[a]
        brackets = np.flatnonzero(delta)
        quotes = np.flatnonzero(a == _QUOTE)
        if len(quotes):
            quotes = self._unescaped(a, quotes)
        if len(brackets):
            # quotes before each bracket decide whether it is inside a string
            inside = (np.searchsorted(quotes, brackets) + self.in_string) % 2 == 1
            steps = delta[brackets].astype(np.int64)
            steps[inside] = 0
            levels = self.depth + np.cumsum(steps)
            deepest = int(levels.max())
            if deepest > self.limit:
                at = int(brackets[int(np.argmax(levels > self.limit))])
                raise FormatError(f"JSON nested deeper than {self.limit} levels", file=self.name,
                                  offset=self.offset + at)
            self.depth = int(levels[-1])
        self.in_string = (self.in_string + len(quotes)) % 2 == 1
        self._carry_backslashes(a)
        self.offset += len(chunk)

    def _unescaped(self, a: np.ndarray, quotes: np.ndarray) -> np.ndarray:
        """The quotes not escaped by an odd run of backslashes (the run may start in an earlier chunk)."""
        backslash = a == _BACKSLASH
        if not backslash.any() and not self.trailing_backslashes:
            return quotes
        positions = np.arange(len(a))
        last_other = np.maximum.accumulate(np.where(backslash, -1, positions))
        before = quotes - 1
        run = np.where(before >= 0, before - last_other[np.maximum(before, 0)], 0)
        from_start = (before >= 0) & (last_other[np.maximum(before, 0)] < 0)
        run = np.where(from_start | (before < 0), run + self.trailing_backslashes, run)
        return quotes[run % 2 == 0]

    def _carry_backslashes(self, a: np.ndarray) -> None:
        others = np.flatnonzero(a != _BACKSLASH)
        if len(others) == len(a):
            self.trailing_backslashes = 0
        elif len(others) == 0:
            self.trailing_backslashes += len(a)
        else:
            self.trailing_backslashes = len(a) - 1 - int(others[-1])


class GuardedReader:
    """A binary stream for a JSON parser: read errors become FormatError naming the file, and the
    nesting depth is checked before the bytes are handed on."""

    def __init__(self, raw: IO[bytes], name: str, limit: int = MAX_JSON_DEPTH) -> None:
        self.raw, self.name = raw, name
        self.guard = DepthGuard(name, limit)

    def read(self, size: int = -1) -> bytes:
        try:
            chunk = self.raw.read(size)
        except _DECOMPRESS_ERRORS as exc:
            raise FormatError(f"corrupt compressed data ({exc})", file=self.name, offset=self.guard.offset) from None
        except OSError as exc:
            raise FormatError(f"cannot read ({exc})", file=self.name, offset=self.guard.offset) from None
        self.guard.feed(chunk)
        return chunk

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> "GuardedReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checked_us(value: Any, what: str, name: str, event: int | None = None, *, limit_ns: int = MAX_TIME_NS):
    """A Kineto time in microseconds (int, float, Decimal or numeric text) checked to be a finite
    number within ``-limit_ns .. limit_ns`` once in ns; FormatError naming file and event otherwise.
    Text becomes a Decimal; numbers come back as given (each reader keeps its own rounding)."""
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except ArithmeticError:
            raise FormatError(f"{what!r} is not a number ({_short(value)})", file=name, event=event) from None
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        raise FormatError(f"{what!r} is missing or not a number ({_short(value)})", file=name, event=event)
    if isinstance(value, float) and not math.isfinite(value) or isinstance(value, Decimal) and not value.is_finite():
        raise FormatError(f"{what!r} is not finite ({value})", file=name, event=event)
    if abs(value) > limit_ns // 1000:
        raise FormatError(f"{what!r} {_short(value)} us is out of range (at most {limit_ns // 1000} us)",
                          file=name, event=event)
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
