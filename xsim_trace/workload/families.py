"""Training-framework families: what a software stack adds to the GPU work of a step.

A :class:`FrameworkFamily` is a frozen set of the stack's costs that are not kernels: the host
(Python + PyTorch eager dispatch) cost of one framework module call and its per-kind factors
(:class:`~xsim_trace.workload.host.HostModel`), CUDA graphs (which replace most of that host work
by graph launches), the optimizer step's host launches, per-iteration host work (data loading,
logging, loss bookkeeping) and the gradient element size of the data-parallel reduction.

``--framework NAME`` on ``xsim generate`` / ``xsim estimate`` resolves through :func:`get_family`
(canonical name or alias, case-insensitive); the default is :data:`DEFAULT_FAMILY`
(``megatron-core``).  A device catalog entry with ``host_op_overhead_ns > 0`` overrides the
family's per-call cost (a measured container/CPU beats a family default).

Where the numbers come from is in each entry's ``source``; docs/workload.md has the table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping

from xsim_trace.errors import ConfigError
from xsim_trace.workload.host import HostModel


@dataclass(frozen=True, slots=True)
class FrameworkFamily:
    """One framework family's non-kernel costs.  Times are integer ns; sizes bytes."""

    name: str
    description: str
    source: str
    #: host cost of one framework module call in eager mode (Python + dispatch + launch)
    host_module_ns: int
    #: per-kind scaling of ``host_module_ns`` (MoE block, unfused attention core)
    host: HostModel = field(default_factory=HostModel)
    #: CUDA graphs capture the layers: the host issues graphs, not modules
    cuda_graphs: bool = False
    #: with CUDA graphs, the fraction of the eager host cost per module that remains
    graph_host_fraction: float = 0.05
    #: host launches of one optimizer step: a fixed part plus one set per gradient bucket
    optimizer_fixed_launches: int = 12
    optimizer_launches_per_bucket: int = 4
    #: exposed host time per iteration to fetch the batch (0: a prefetching loader hides it)
    data_loading_ns: int = 0
    #: other host work per iteration outside the passes (logging, loss sync, callbacks)
    step_host_ns: int = 0
    #: bytes per gradient element in the data-parallel reduction (fp32 main grads: 4; bf16: 2)
    grad_reduce_bytes: int = 4
    aliases: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        where = f"framework_family.{self.name}"
        for name in ("host_module_ns", "optimizer_fixed_launches", "optimizer_launches_per_bucket",
                     "data_loading_ns", "step_host_ns"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"expected a non-negative integer, found {value!r}", field=f"{where}.{name}")
        if not 0.0 <= self.graph_host_fraction <= 1.0:
            raise ConfigError(f"expected a fraction in [0, 1], found {self.graph_host_fraction!r}",
                              field=f"{where}.graph_host_fraction")
        if self.grad_reduce_bytes not in (2, 4):
            raise ConfigError(f"expected 2 (bf16) or 4 (fp32), found {self.grad_reduce_bytes!r}",
                              field=f"{where}.grad_reduce_bytes")

    def module_host_ns(self, device_override_ns: int = 0) -> float:
        """Host cost of one module call: the device catalog's override when set, else the family's,
        reduced to ``graph_host_fraction`` under CUDA graphs."""
        base = device_override_ns or self.host_module_ns
        return base * (self.graph_host_fraction if self.cuda_graphs else 1.0)

    @property
    def step_fixed_host_ns(self) -> int:
        """Host time per iteration outside the passes (data loading + bookkeeping)."""
        return self.data_loading_ns + self.step_host_ns

    def with_(self, **changes) -> "FrameworkFamily":
        return dataclasses.replace(self, **changes)


#: Megatron-core (Megatron-LM's training loop, TE layers, eager).  The host per-module cost is the
#: median of the three Megatron-LM CI containers' fits (tools/accuracy_megatron.py --fit, issue 13's
#: seventh round: dev A100 380 us, lts A100 264 us, dev H100 245 us, each the cost without
#: deterministic kernels); the per-kind factors (MoE 0.8 / 2.0 / 1.4, unfused attention core 1.2 /
#: 1.5 / 1.5), the deterministic-mode factor and the local-modules factor (``--transformer-impl
#: local``: 0.8 / 1.0 / 0.7) are their medians too.
MEGATRON_CORE = FrameworkFamily(
    name="megatron-core",
    description="Megatron-LM / Megatron-core training loop, eager mode, fp32 main grads",
    source="fitted on Megatron-LM CI step times (../shared/reference/megatron_ci_step_times.csv, "
    "median of the per-container fits); optimizer launches from Megatron's distributed optimizer "
    "(one fused Adam multi-tensor pass per bucket)",
    host_module_ns=263_636,
    host=HostModel(moe_factor=1.4, attention_core_factor=1.5, deterministic_factor=1.1, local_impl_factor=0.8),
    aliases=("megatron", "mcore", "megatron-lm", "megatron_core"),
)

#: NeMo 2 on Megatron-core: the same layers under PyTorch Lightning, whose per-step hooks
#: (callbacks, logging, checkpoint-condition checks) add host time per iteration (``step_host_ns``).
NEMO = dataclasses.replace(
    MEGATRON_CORE,
    name="nemo",
    description="NeMo 2 (Lightning) on Megatron-core: Megatron-core layers plus Lightning per-step hooks",
    source="Megatron-core's costs; no NeMo row in ../shared/reference to fit Lightning's per-step hooks "
    "on, so step_host_ns stays 0 until one is (set it with a family override)",
    aliases=("nemo2", "nemo-megatron"),
)

#: torchtitan: FSDP2 (per-layer parameter all-gather, gradient reduce-scatter), eager by default.
#: Its modules are plain PyTorch (no TE), with FSDP2 pre/post hooks per layer.
TORCHTITAN = FrameworkFamily(
    name="torchtitan",
    description="torchtitan / FSDP2: per-layer sharded parameters, eager PyTorch modules, fp32 gradient reduction",
    source="torchtitan defaults (MixedPrecisionPolicy param bf16, reduce fp32); host per-module cost as "
    "megatron-core (same eager PyTorch dispatch), not fitted on a torchtitan row",
    host_module_ns=263_636,
    host=HostModel(moe_factor=1.4, attention_core_factor=1.5, deterministic_factor=1.1),
    optimizer_fixed_launches=12,
    optimizer_launches_per_bucket=0,
    aliases=("fsdp2", "titan", "torch-titan"),
)

#: DeepSpeed's pipeline engine (Megatron-DeepSpeed v1.1.5 as AMP ran it; Sailor's fork): eager fp16 with DeepSpeed's
#: fp16 optimizer (fp32 master weights, Adam), 1F1B ``TrainSchedule``, blocking two-rank p2p, fp32 gradient
#: all-reduce (``fp32_allreduce: true`` in AMP's ds_config.json) after the last backward, tied-embedding gradient
#: all-reduce between the first and last stage.  The per-module host cost is fitted on AMP's 16x T4 homogeneous
#: runs (tools/accuracy_hetero.py --fit; the heterogeneous pipeline closed form is
#: xsim_trace.validate.hetero_predict).  It is an effective value: on those runs it also absorbs the DeepSpeed
#: engine's per-instruction Python work.
DEEPSPEED = FrameworkFamily(
    name="deepspeed",
    description="DeepSpeed pipeline engine (Megatron-DeepSpeed): eager fp16, fp16 optimizer, fp32 gradient all-reduce",
    source="host_module_ns fitted on AMP's homogeneous 16x T4 runs (../shared/reference/hetero_measured.csv, "
    "H090-H141, tools/accuracy_hetero.py --fit); gradient dtype from AMP's ds_config.json (fp32_allreduce); "
    "optimizer launches: DeepSpeed fp16 optimizer (overflow check, unscale, norm, Adam, fp16 copy)",
    host_module_ns=400_000,
    host=HostModel(),
    optimizer_fixed_launches=16,
    optimizer_launches_per_bucket=2,
    grad_reduce_bytes=4,
    aliases=("ds", "deepspeed-zero", "megatron-deepspeed", "deepspeed-pipe"),
)

DEFAULT_FAMILY = MEGATRON_CORE.name

FAMILIES: Mapping[str, FrameworkFamily] = {f.name: f for f in (MEGATRON_CORE, NEMO, TORCHTITAN, DEEPSPEED)}


def _key(name: str) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def list_families() -> list[str]:
    return sorted(FAMILIES)


def get_family(name: "str | FrameworkFamily | None" = None) -> FrameworkFamily:
    """The family named ``name`` (canonical or alias, case-insensitive); None -> the default."""
    if isinstance(name, FrameworkFamily):
        return name
    key = _key(name or DEFAULT_FAMILY)
    for fam in FAMILIES.values():
        if key == fam.name or key in {_key(a) for a in fam.aliases}:
            return fam
    raise ConfigError(f"unknown framework {name!r}; known frameworks: {', '.join(list_families())}", field="framework")
