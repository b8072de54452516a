"""Rows of a measured-runs table that report model FLOPs utilisation (``metric`` = ``MFU``, value in %) instead of
an iteration time: what their source fixes (the prediction itself: :mod:`xsim_trace.validate.hetero_flashflex`).

The only MFU rows known are HexiScale / FlashFlex's (arXiv 2409.01143; github.com/Relaxed-System-Lab/FlashFlex,
README "Performance Results" at 5ee1726).  What that repository fixes, read from its files:

- the sequence length: 4096 (``hexiscale/process_args.py`` sets ``args.seq_length = 4096`` whatever the flag says;
  ``experimental/config.py`` has ``S = 4096``), the vocabulary 32000 (``experimental/config.py``);
- the MFU formula (``experimental/cost_modeling.py``, ``TimeCost.mfu`` / ``glb_flops``, used by
  ``experimental/compute_mfu.py`` on a measured running time): ``96 * L * B * s * h^2 * (1 + s / (6 h) +
  V / (16 L h))`` FLOPs per iteration (96 with activation recompute, the default, 72 without; every training
  script passes ``--checkpoint-layers --checkpoint-all``) over the running time and the summed peak of all GPUs,
  each peak in "TFLOPS" of 2^40 FLOP/s (``experimental/utils.py``: ``tensor_core * 1024**4``);
- the per-GPU peaks (``experimental/machine_amounts.json``): 3080Ti 56.9, 3090 80, 4090 165.2, A100 312.  With
  them the README's "same total FLOPS" holds: 16 A100 = 4992, 8 3080Ti + 8 3090 + 24 4090 = 5060,
  8 3080Ti + 8 3090 + 8 4090 + 8 A100 = 4912.8, 32 A100 = 9984, 8 3090 + 40 4090 + 8 A100 = 9744.

What it does not give: the global batch, the micro-batch count, the plan HexiScale's search chose for each README
setting (``--hetero_configs``, ``--layer_partitions``; the search in ``experimental/main.py`` starts from a random
partition and its inputs, batch and assumed inter-node bandwidth included, are not recorded), and the Megatron
baselines' TP / PP / DP and batch.  The measured MFU therefore converts to a throughput (tokens/s, below), and to
an iteration time only at an assumed batch, and the deployment has to be chosen (by xsim's plan search, in
:mod:`~xsim_trace.validate.hetero_flashflex`); :func:`mfu_row_error` names the column of an MFU row that is not
predicted.
"""

from __future__ import annotations

import re

from xsim_trace.validate.hetero_rows import RawRow, RowError, parse_gpus

#: per-GPU peak "TFLOPS" HexiScale's MFU divides by (experimental/machine_amounts.json at a4f366f), by catalog name
FLASHFLEX_PEAK_TFLOPS = {"RTX-3080-Ti": 56.9, "RTX-3090": 80.0, "RTX-4090": 165.2, "A100-PCIE-80GB": 312.0,
                         "A100-PCIE-40GB": 312.0, "A100-SXM4-80GB": 312.0, "A100-SXM4-40GB": 312.0}
#: one of HexiScale's "TFLOPS" in FLOP/s (experimental/utils.py multiplies by 1024**4)
FLASHFLEX_TFLOPS_UNIT = 1024.0 ** 4
FLASHFLEX_SEQ = 4096  # hexiscale/process_args.py
FLASHFLEX_VOCAB = 32000  # experimental/config.py
_SOURCE_WORDS = ("flashflex", "hexiscale")


def is_mfu_row(raw: RawRow) -> bool:
    return raw.metric.upper() == "MFU"


def from_flashflex(raw: RawRow) -> bool:
    text = " ".join(raw.fields.get(c, "") for c in ("source", "notes", "plan")).lower()
    return any(w in text for w in _SOURCE_WORDS)


def flashflex_flops_per_token(layers: int, hidden: int, seq_len: int, vocab: int, recompute: bool = True) -> float:
    """Model FLOPs per trained token by HexiScale's formula (Megatron's, SC'21 eq. 3, recompute counted)."""
    alpha = 96 if recompute else 72
    return alpha * layers * hidden ** 2 * (1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden))


def _dim(raw: RawRow, pattern: str, what: str) -> int:
    m = re.search(pattern, raw.fields.get("model_dims", ""), re.IGNORECASE)
    if not m:
        raise RowError(raw.row_id, "model_dims", f"no {what} found")
    return int(m.group(1))


def flashflex_tokens_per_s(raw: RawRow) -> float:
    """The throughput a FlashFlex MFU row states: MFU x summed repository peak / FLOPs per token (seq and vocab
    from the row, else the repository's 4096 / 32000)."""
    text = raw.fields.get("value", "").strip()
    try:
        mfu_pct = float(text)
    except ValueError:
        raise RowError(raw.row_id, "value", f"expected an MFU in %, found {text!r}") from None
    peak_tflops = 0.0
    for dev, n in parse_gpus(raw):
        if dev not in FLASHFLEX_PEAK_TFLOPS:
            raise RowError(raw.row_id, "gpus", f"{dev} has no peak in FlashFlex's experimental/machine_amounts.json")
        peak_tflops += FLASHFLEX_PEAK_TFLOPS[dev] * n
    layers = _dim(raw, r"(\d+)\s+layers", "'<n> layers'")
    hidden = _dim(raw, r"hidden\s+(\d+)", "'hidden <n>'")
    seq_text = raw.fields.get("seq", "").strip()
    seq = int(seq_text) if seq_text.isdigit() else FLASHFLEX_SEQ
    m = re.search(r"vocab\s+(\d+)", raw.fields.get("model_dims", ""), re.IGNORECASE)
    vocab = int(m.group(1)) if m else FLASHFLEX_VOCAB
    return mfu_pct / 100 * peak_tflops * FLASHFLEX_TFLOPS_UNIT / flashflex_flops_per_token(layers, hidden, seq, vocab)


def flashflex_predictable(raw: RawRow) -> bool:
    """A FlashFlex MFU row whose plan is left to the plan search (:mod:`xsim_trace.validate.hetero_flashflex`):
    its plan column is not one of the DeepSpeed pipeline forms (Sailor / AMP), which describe another engine."""
    return from_flashflex(raw) and not re.search(r"boundaries|\bS0\s*:", raw.fields.get("plan", ""))


def mfu_row_error(raw: RawRow) -> RowError:
    """Why an MFU row is not predicted: its source is not FlashFlex, its value or GPUs cannot be read by the
    repository's convention, or it carries a DeepSpeed pipeline plan (Sailor / AMP form) that FlashFlex's engine
    does not run."""
    if not from_flashflex(raw):
        return RowError(raw.row_id, "metric", f"metric {raw.metric!r}: MFU rows are read by FlashFlex's convention "
                                              "only (source/notes name FlashFlex or HexiScale)")
    try:
        rate = f"{flashflex_tokens_per_s(raw):,.0f} tokens/s"
    except RowError as exc:
        return exc
    fixed = (f"MFU {raw.fields.get('value', '').strip()}% = {rate} by the repository's formula (96 l h^2 (1 + s/6h "
             f"+ V/16lh) FLOPs per token, seq {FLASHFLEX_SEQ}, peaks of experimental/machine_amounts.json x 2^40)")
    return RowError(raw.row_id, "metric", "an MFU row with a Sailor or AMP plan is not converted to seconds: "
                                          "FlashFlex runs FSDP data parallelism and GPipe, which the DeepSpeed pipeline "
                                          f"model does not describe; {fixed}")


__all__ = ["FLASHFLEX_PEAK_TFLOPS", "FLASHFLEX_SEQ", "FLASHFLEX_TFLOPS_UNIT", "FLASHFLEX_VOCAB",
           "flashflex_flops_per_token", "flashflex_predictable", "flashflex_tokens_per_s", "from_flashflex", "is_mfu_row", "mfu_row_error"]
