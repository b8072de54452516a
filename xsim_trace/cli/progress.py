"""Progress bars for the CLI (tqdm), off when quiet or when stderr is not a terminal."""

from __future__ import annotations

import sys
from typing import Any

#: files / jobs smaller than this get no bar
PROGRESS_MIN_ITEMS = 100_000


def progress_bar(
    total: int | None,
    desc: str,
    *,
    quiet: bool = False,
    unit: str = "node",
    min_items: int = PROGRESS_MIN_ITEMS,
    **kwargs: Any,
) -> Any:
    """A tqdm bar on stderr; disabled when quiet, when stderr is not a terminal, or when ``total``
    is known and below ``min_items`` (pass a small ``min_items`` for few but long items, e.g. runs).
    A disabled bar is a :class:`NullBar`: tqdm (~0.05 s of imports) is loaded only to draw one."""
    if quiet or (total is not None and total < min_items) or not sys.stderr.isatty():
        return NullBar(total)
    from tqdm import tqdm  # noqa: PLC0415

    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False, **kwargs)


class NullBar:
    """What a disabled tqdm bar does: nothing (``update``, ``close``, ``set_postfix`` ... accepted)."""

    disable = True

    def __init__(self, total: int | None = None) -> None:
        self.total = total
        self.n = 0

    def __enter__(self) -> "NullBar":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, n: float = 1) -> None:
        return None

    def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _nothing


def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


class RowProgress:
    """Progress over a few long items (plan variants, search candidates): a tqdm bar on a terminal,
    else one line per finished item on stderr (so logs and CI show that a long run moves)."""

    def __init__(self, total: int, desc: str, *, quiet: bool = False) -> None:
        self.total, self.desc, self.quiet, self.done = total, desc, quiet, 0
        self.bar = progress_bar(total, desc, quiet=quiet, unit="item", min_items=2) if sys.stderr.isatty() else None

    def __enter__(self) -> "RowProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()

    def update(self, text: str = "") -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif not self.quiet:
            print(f"{self.desc} [{self.done}/{self.total}] {text}".rstrip(), file=sys.stderr, flush=True)
