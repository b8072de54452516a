"""Sorted distinct values and rows, as ``np.unique`` gives them, without ``np.unique``: numpy 2.x's
``unique`` asks ``np.ma.is_masked``, which imports ``numpy.ma`` (~0.02 s of CPU) on its first call,
a tenth of a small replay's whole process.  Used on the replay path that every replay runs."""

from __future__ import annotations

import numpy as np


def sorted_distinct(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` of a 1-D integer array: its distinct values, ascending."""
    s = np.sort(a, kind="stable")
    if s.shape[0] < 2:
        return s
    keep = np.empty(s.shape[0], bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def all_distinct(a: np.ndarray) -> bool:
    """Whether no value of the 1-D integer array repeats (``len(np.unique(a)) == len(a)``)."""
    s = np.sort(a)
    return bool(s.shape[0] < 2 or np.all(s[1:] != s[:-1]))


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_inverse=True)`` of a 2-D integer array: the distinct rows in
    lexicographic order, and each row's index among them."""
    n = rows.shape[0]
    if n == 0:
        return rows.copy(), np.zeros(0, np.int64)
    order = np.lexsort(rows.T[::-1])
    s = rows[order]
    new = np.empty(n, bool)
    new[0] = True
    np.any(s[1:] != s[:-1], axis=1, out=new[1:])
    inverse = np.empty(n, np.int64)
    inverse[order] = np.cumsum(new) - 1
    return s[new], inverse
