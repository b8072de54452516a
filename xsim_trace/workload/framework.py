"""Megatron-style framework parameters: parallelism, batch, recompute, optimizer sharding, precision."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from xsim_trace.devices.spec import Precision
from xsim_trace.errors import ConfigError
from xsim_trace.workload.model import ModelSpec


class Recompute(enum.Enum):
    NONE = "none"
    SELECTIVE = "selective"  # attention core (scores, softmax, dropout) recomputed in backward
    FULL = "full"  # every layer's forward recomputed in backward


class Schedule(enum.Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"


#: Megatron's ``--transformer-impl`` choices
TRANSFORMER_IMPLS = ("transformer_engine", "local")
#: Megatron's ``--moe-token-dispatcher-type`` choices the generator models
MOE_DISPATCHERS = ("alltoall", "allgather")


def _enum(cls: type[enum.Enum], value: Any, field_name: str) -> Any:
    if isinstance(value, cls):
        return value
    try:
        return cls(str(value).lower())
    except ValueError:
        known = ", ".join(m.value for m in cls)
        raise ConfigError(f"expected one of {known}, found {value!r}", field=field_name) from None


@dataclass(frozen=True, slots=True)
class Framework:
    """One homogeneous Megatron configuration.  World size = tp * pp * cp * dp.

    ``grad_accum`` (micro-batches per iteration per DP replica) is derived from the batch sizes
    when 0; if given it must agree.  ``distributed_optimizer`` is ZeRO-1; ``zero_stage`` 2/3
    additionally shards gradients / parameters over DP.  ``etp`` (expert TP) defaults to ``tp``.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 0
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    zero_stage: int = 0
    recompute: Recompute = Recompute.NONE
    micro_batch: int = 1
    global_batch: int = 1
    grad_accum: int = 0
    precision: Precision = Precision.BF16
    schedule: Schedule = Schedule.ONE_F_ONE_B
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    bucket_size_bytes: int = 0  # 0 = Megatron's default: max(40M, 1M * dp) parameters per bucket
    #: LoRA / PEFT: adapter rank on the linear layers (qkv, proj, fc1, fc2); 0 = full training.  The
    #: base weights are frozen: no weight-gradient GEMMs, no DP traffic, no optimizer state for them
    lora_rank: int = 0
    #: MoE routing imbalance: tokens of the busiest expert-parallel rank / the balanced share (>= 1);
    #: the all-to-all and the expert GEMMs wait for that rank
    moe_imbalance: float = 1.0
    #: deterministic mode (Megatron ``--deterministic-mode``: deterministic kernels, NaN-filled fresh
    #: allocations); its host cost is the framework family's ``host.deterministic_factor``
    deterministic: bool = False
    #: Megatron ``--transformer-impl``: ``transformer_engine`` (default) or ``local`` (Megatron's own
    #: modules); a local run's host calls cost the framework family's ``host.local_impl_factor``
    transformer_impl: str = "transformer_engine"
    #: Megatron's RoPE fusion (on by default; ``--no-rope-fusion`` turns it off): fused, one Transformer
    #: Engine kernel per rotated tensor; unfused, the eager torch ops of Megatron's
    #: ``_apply_rotary_pos_emb_bshd`` (:func:`xsim_trace.workload.ops.rope_ops`)
    rope_fusion: bool = True
    #: MoE token dispatcher (Megatron ``--moe-token-dispatcher-type``): ``alltoall`` (the default here, what
    #: large runs use) or ``allgather`` (Megatron's own default: every rank gathers the expert-TP x EP
    #: group's tokens and keeps its experts' share, then reduce-scatters the result)
    moe_dispatcher: str = "alltoall"

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "dp", "vpp", "cp", "ep", "micro_batch", "global_batch"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"expected a positive integer, found {v!r}", field=f"framework.{f}")
        for f in ("etp", "grad_accum", "zero_stage", "bucket_size_bytes", "lora_rank"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"expected a non-negative integer, found {v!r}", field=f"framework.{f}")
        if isinstance(self.moe_imbalance, bool) or not isinstance(self.moe_imbalance, (int, float)) or not self.moe_imbalance >= 1.0:
            raise ConfigError(f"expected a number >= 1, found {self.moe_imbalance!r}", field="framework.moe_imbalance")
        if not isinstance(self.rope_fusion, bool):
            raise ConfigError(f"expected true or false, found {self.rope_fusion!r}", field="framework.rope_fusion")
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise ConfigError(f"expected one of {', '.join(MOE_DISPATCHERS)}, found {self.moe_dispatcher!r}",
                              field="framework.moe_dispatcher")
        if self.transformer_impl not in TRANSFORMER_IMPLS:
            raise ConfigError(f"expected one of {', '.join(TRANSFORMER_IMPLS)}, found {self.transformer_impl!r}",
                              field="framework.transformer_impl")
        object.__setattr__(self, "recompute", _enum(Recompute, self.recompute, "framework.recompute"))
        object.__setattr__(self, "schedule", _enum(Schedule, self.schedule, "framework.schedule"))
        object.__setattr__(self, "precision", Precision.parse(self.precision, field_name="framework.precision"))
        if self.precision not in (Precision.BF16, Precision.FP16, Precision.FP8):
            raise ConfigError(f"expected precision bf16, fp16 or fp8, found {self.precision.value}", field="framework.precision")
        if self.zero_stage > 3:
            raise ConfigError(f"expected zero_stage 0..3, found {self.zero_stage}", field="framework.zero_stage")
        if self.distributed_optimizer and self.zero_stage == 0:
            object.__setattr__(self, "zero_stage", 1)
        if self.etp == 0:
            object.__setattr__(self, "etp", self.tp)
        if self.vpp > 1 and self.schedule is Schedule.ONE_F_ONE_B:
            object.__setattr__(self, "schedule", Schedule.INTERLEAVED)
        per_step = self.micro_batch * self.dp
        if self.global_batch % per_step:
            raise ConfigError(
                f"global_batch {self.global_batch} is not a multiple of micro_batch*dp = {per_step}",
                field="framework.global_batch",
            )
        derived = self.global_batch // per_step
        if self.grad_accum == 0:
            object.__setattr__(self, "grad_accum", derived)
        elif self.grad_accum != derived:
            raise ConfigError(
                f"grad_accum {self.grad_accum} disagrees with global_batch/(micro_batch*dp) = {derived}",
                field="framework.grad_accum",
            )
        if self.sequence_parallel and self.tp == 1:
            object.__setattr__(self, "sequence_parallel", False)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def microbatches(self) -> int:
        """Micro-batches per iteration on each pipeline (= gradient accumulation steps)."""
        return self.grad_accum

    def with_(self, **changes: Any) -> "Framework":
        return dataclasses.replace(self, **changes)

    def check_model(self, model: ModelSpec) -> None:
        """Raise ConfigError if this configuration cannot shard ``model``."""
        if model.heads % self.tp:
            raise ConfigError(f"tp {self.tp} does not divide heads {model.heads}", field="framework.tp")
        if model.kv_heads % self.tp and self.tp % model.kv_heads:
            raise ConfigError(f"tp {self.tp} and kv_heads {model.kv_heads} do not divide one another", field="framework.tp")
        chunks = self.pp * self.vpp
        if model.layers < chunks:
            raise ConfigError(f"{model.layers} layers cannot fill pp*vpp = {chunks} chunks", field="framework.pp")
        if model.seq_len % (self.cp * (2 if self.cp > 1 else 1)):
            raise ConfigError(f"seq_len {model.seq_len} is not divisible by 2*cp = {2 * self.cp}", field="framework.cp")
        if self.ep > 1:
            if not model.is_moe:
                raise ConfigError(f"ep {self.ep} needs an MoE model; {model.name} is dense", field="framework.ep")
            if model.moe_experts % self.ep:
                raise ConfigError(f"ep {self.ep} does not divide {model.moe_experts} experts", field="framework.ep")
            if (self.dp * self.cp * self.tp) % (self.ep * self.etp):
                raise ConfigError(
                    f"ep*etp = {self.ep * self.etp} does not divide dp*cp*tp = {self.dp * self.cp * self.tp}",
                    field="framework.ep",
                )
        if self.vpp > 1 and self.microbatches % self.pp:
            raise ConfigError(
                f"interleaved schedule needs micro-batches ({self.microbatches}) divisible by pp {self.pp}",
                field="framework.vpp",
            )

    def stage_layers(self, model: ModelSpec) -> list[int]:
        """Layers per pipeline chunk (pp*vpp chunks, in chunk order); remainders go to the middle
        chunks first so the first and last stage (embedding / head) stay lighter."""
        chunks = self.pp * self.vpp
        base, rem = divmod(model.layers, chunks)
        counts = [base] * chunks
        order = sorted(range(chunks), key=lambda c: (c in (0, chunks - 1), abs(c - (chunks - 1) / 2), c))
        for c in order[:rem]:
            counts[c] += 1
        return counts
