"""Rank layout (Megatron order tp-cp-dp-pp, tp fastest) and the process groups it implies."""

from __future__ import annotations

from dataclasses import dataclass

from xsim_trace.workload.framework import Framework


@dataclass(frozen=True, slots=True)
class Coord:
    tp: int
    cp: int
    dp: int
    pp: int


@dataclass(frozen=True, slots=True)
class Layout:
    fw: Framework

    def rank(self, c: Coord) -> int:
        f = self.fw
        return c.tp + f.tp * (c.cp + f.cp * (c.dp + f.dp * c.pp))

    def coord(self, rank: int) -> Coord:
        f = self.fw
        tp, rest = rank % f.tp, rank // f.tp
        cp, rest = rest % f.cp, rest // f.cp
        dp, pp = rest % f.dp, rest // f.dp
        return Coord(tp, cp, dp, pp)

    def tp_group(self, rank: int) -> tuple[int, ...]:
        c = self.coord(rank)
        return tuple(self.rank(Coord(t, c.cp, c.dp, c.pp)) for t in range(self.fw.tp))

    def cp_group(self, rank: int) -> tuple[int, ...]:
        c = self.coord(rank)
        return tuple(self.rank(Coord(c.tp, k, c.dp, c.pp)) for k in range(self.fw.cp))

    def dp_group(self, rank: int) -> tuple[int, ...]:
        """Gradient-sync group: all replicas of this shard, over DP and CP (Megatron's dp-cp group)."""
        c = self.coord(rank)
        return tuple(sorted(self.rank(Coord(c.tp, k, d, c.pp)) for d in range(self.fw.dp) for k in range(self.fw.cp)))

    def ep_group(self, rank: int) -> tuple[int, ...]:
        """Expert-parallel group: within one stage, ranks with the same expert-TP index and the same
        expert-DP index (expert layout etp fastest, then ep)."""
        f = self.fw
        c = self.coord(rank)
        per_stage = f.tp * f.cp * f.dp
        local = rank - c.pp * per_stage
        etp_r, rest = local % f.etp, local // f.etp
        edp = rest // f.ep
        base = c.pp * per_stage
        return tuple(base + etp_r + f.etp * (e + f.ep * edp) for e in range(f.ep))

    def expert_dp_group(self, rank: int) -> tuple[int, ...]:
        """Ranks of the stage holding the same experts (same etp and ep index): expert-grad sync."""
        f = self.fw
        c = self.coord(rank)
        per_stage = f.tp * f.cp * f.dp
        local = rank - c.pp * per_stage
        etp_r, rest = local % f.etp, local // f.etp
        e = rest % f.ep
        n_edp = per_stage // (f.etp * f.ep)
        base = c.pp * per_stage
        return tuple(base + etp_r + f.etp * (e + f.ep * d) for d in range(n_edp))

    def pp_group(self, rank: int) -> tuple[int, ...]:
        c = self.coord(rank)
        return tuple(self.rank(Coord(c.tp, c.cp, c.dp, s)) for s in range(self.fw.pp))

    def embedding_group(self, rank: int) -> tuple[int, ...]:
        """The first and last stage's ranks of this tp/cp/dp coordinate (Megatron's embedding group:
        they hold the two copies of a tied embedding)."""
        c = self.coord(rank)
        return (self.rank(Coord(c.tp, c.cp, c.dp, 0)), self.rank(Coord(c.tp, c.cp, c.dp, self.fw.pp - 1)))
