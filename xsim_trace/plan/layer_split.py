"""Non-uniform layer partitioning across pipeline stages of different speed and memory.

Stage ``i`` runs one layer in ``layer_time_ns[i]`` (its devices, its TP degree, calibrated from the
device catalog), so its throughput is ``1 / layer_time_ns[i]``.  The first stage also runs the
embedding and the last the output head; their cost is given in layer equivalents of that stage and
discounted from its share.  Ideal shares equalise stage time; largest-remainder rounding makes them
whole; then layers move off stages whose memory they exceed onto the stage that stays fastest.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from xsim_trace.errors import ConfigError


@dataclass(frozen=True, slots=True)
class StageCapacity:
    layer_time_ns: int  # one layer (fwd+bwd of one micro-batch) on this stage
    max_layers: int | None = None  # memory limit in layers; None = unlimited
    extra_layer_equiv: Fraction | float = 0  # embedding / head cost on this stage, in its layers
    name: str = ""


@dataclass(frozen=True, slots=True)
class Move:
    layers: int
    from_stage: int
    to_stage: int
    reason: str


@dataclass(frozen=True, slots=True)
class PartitionReport:
    counts: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]
    ideal: tuple[float, ...]  # shares before rounding
    stage_time_ns: tuple[int, ...]  # (layers + extra) * layer_time per micro-batch
    moves: tuple[Move, ...]
    rounded: tuple[int, ...] = ()  # per-stage counts of the rounding when evaluation chose others
    estimate_ns: int = 0  # closed-form pipeline time of the counts (0: not evaluated)
    rounded_estimate_ns: int = 0  # the same for ``rounded``

    @property
    def bottleneck_ns(self) -> int:
        return max(self.stage_time_ns)

    def lines(self, names: Sequence[str] = ()) -> list[str]:
        out = []
        for i, (c, (a, b), ideal, t) in enumerate(zip(self.counts, self.ranges, self.ideal, self.stage_time_ns)):
            name = names[i] if i < len(names) else f"stage {i}"
            out.append(f"{name}: layers [{a}, {b}) = {c} (ideal {ideal:.2f}), {t / 1e6:.3f} ms per micro-batch")
        for m in self.moves:
            out.append(f"moved {m.layers} layer(s) from stage {m.from_stage} to {m.to_stage}: {m.reason}")
        if self.rounded:
            out.append(f"evaluated: rounding gives {'/'.join(map(str, self.rounded))} "
                       f"({self.rounded_estimate_ns / 1e6:.2f} ms per pipeline, closed form), the slowest-stage "
                       f"evaluation picks {'/'.join(map(str, self.stage_counts))} ({self.estimate_ns / 1e6:.2f} ms)")
        return out

    @property
    def stage_counts(self) -> tuple[int, ...]:
        """Layers per physical stage (virtual stages folded when ``rounded`` is per physical stage)."""
        if not self.rounded or len(self.rounded) == len(self.counts):
            return self.counts
        p = len(self.rounded)
        return tuple(sum(self.counts[s::p]) for s in range(p))


def largest_remainder(shares: Sequence[Fraction], total: int, minimum: int = 0) -> list[int]:
    """Whole numbers summing to ``total``: floors of ``shares`` (at least ``minimum``), then one more
    to the largest fractional parts (ties: lower index) until the total is met."""
    counts = [max(minimum, int(s)) if s >= 0 else minimum for s in shares]
    rest = total - sum(counts)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - int(shares[i])) if shares[i] >= minimum else 1, i))
    while rest > 0:
        for i in order:
            if rest == 0:
                break
            counts[i] += 1
            rest -= 1
    while rest < 0:  # minimums overshot: take from the largest counts
        i = max(range(len(counts)), key=lambda k: (counts[k] - shares[k], counts[k], -k))
        if counts[i] <= minimum:
            raise ConfigError(f"cannot give every stage at least {minimum} layer(s) out of {total}")
        counts[i] -= 1
        rest += 1
    return counts


def _times(counts: Sequence[int], stages: Sequence[StageCapacity]) -> tuple[int, ...]:
    return tuple(int(round((c + float(s.extra_layer_equiv)) * s.layer_time_ns)) for c, s in zip(counts, stages))


def _ranges(counts: Sequence[int]) -> tuple[tuple[int, int], ...]:
    out, start = [], 0
    for c in counts:
        out.append((start, start + c))
        start += c
    return tuple(out)


def partition_layers(num_layers: int, stages: Sequence[StageCapacity]) -> PartitionReport:
    """Throughput-proportional, memory-respecting partition of ``num_layers`` layers."""
    if not stages:
        raise ConfigError("no stages to partition over", field="stages")
    if num_layers < len(stages):
        raise ConfigError(f"{num_layers} layers cannot fill {len(stages)} stages", field="num_layers")
    for i, s in enumerate(stages):
        if s.layer_time_ns <= 0:
            raise ConfigError(f"expected a positive per-layer time, found {s.layer_time_ns}", field=f"stages[{i}].layer_time_ns")
    thr = [Fraction(1, s.layer_time_ns) for s in stages]
    extra = [Fraction(s.extra_layer_equiv).limit_denominator(10**6) for s in stages]
    # equal time T per stage: (n_i + e_i) * t_i = T  =>  n_i = T * thr_i - e_i,  sum n_i = L
    horizon = (num_layers + sum(extra)) / sum(thr)
    ideal = [horizon * t - e for t, e in zip(thr, extra)]
    counts = largest_remainder(ideal, num_layers, minimum=1)
    moves: list[Move] = []
    cap = [s.max_layers if s.max_layers is not None else num_layers for s in stages]
    if sum(cap) < num_layers:
        raise ConfigError(f"the stages' memory holds {sum(cap)} layers, the model has {num_layers}", field="stages")
    for i in range(len(stages)):
        if cap[i] < 1:
            raise ConfigError("a stage's memory holds no layer", field=f"stages[{i}].max_layers")
    while True:
        over = [i for i in range(len(counts)) if counts[i] > cap[i]]
        if not over:
            break
        i = over[0]
        room = [j for j in range(len(counts)) if counts[j] < cap[j]]
        trial = {j: _times([c + (1 if k == j else 0) for k, c in enumerate(counts)], stages)[j] for j in room}
        j = min(room, key=lambda k: (trial[k], k))
        counts[i] -= 1
        counts[j] += 1
        k = next((n for n, mv in enumerate(moves) if (mv.from_stage, mv.to_stage) == (i, j)), None)
        if k is None:
            moves.append(Move(1, i, j, f"stage {i} memory holds {cap[i]} layers"))
        else:
            moves[k] = Move(moves[k].layers + 1, i, j, moves[k].reason)
    return PartitionReport(
        counts=tuple(counts),
        ranges=_ranges(counts),
        ideal=tuple(float(x) for x in ideal),
        stage_time_ns=_times(counts, stages),
        moves=tuple(moves),
    )


def uniform_partition(num_layers: int, num_stages: int) -> tuple[tuple[int, int], ...]:
    """Equal layers per stage (the first stages take the remainder)."""
    base, rem = divmod(num_layers, num_stages)
    return _ranges([base + (1 if i < rem else 0) for i in range(num_stages)])
