"""Comm-group ids the converters write are ASTRA-sim's: the world is pg "0" with no entry, others from 1."""

from __future__ import annotations

from converters.crossrank import WORLD_PG, astra_group_ids


def test_world_zero_is_left_out_and_positive_ids_kept():
    groups = {"0": (0, 1, 2, 3), "2": (0, 1), "5": (2, 3)}
    assert astra_group_ids(groups, 4) == {"0": WORLD_PG, "2": "2", "5": "5"}


def test_other_names_get_fresh_integer_ids():
    # a non-numeric name, a "0" that is not the world, a zero-padded id, and a world-sized group of its own name
    groups = {"ranks:0,1": (0, 1), "0": (2, 3), "007": (1, 2), "4": (0, 1, 2, 3), "3": (0, 3)}
    rename = astra_group_ids(groups, 4)
    assert rename["4"] == "4" and rename["3"] == "3"
    fresh = [rename[k] for k in sorted(groups) if k not in ("3", "4")]
    assert fresh == ["5", "6", "7"]  # after the largest kept id, in name order
    assert len(set(rename.values())) == len(groups)
