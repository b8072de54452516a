"""Progress bars for the CLI (tqdm), off when quiet or when stderr is not a terminal."""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

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
) -> tqdm:
    """A tqdm bar on stderr; disabled when quiet, when stderr is not a terminal, or when ``total``
    is known and below ``min_items`` (pass a small ``min_items`` for few but long items, e.g. runs)."""
    disable = quiet or (total is not None and total < min_items) or not sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, disable=disable, leave=False, **kwargs)
