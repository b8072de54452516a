"""Host (CPU) cost model of a training framework: what one framework module call costs on the host
thread that issues the GPU work, by kind of module.

Small and medium models in Megatron-style frameworks are host bound: the Python / PyTorch eager
work per module call, not the GPU kernels, sets the pace.  The base cost per call is the device
catalog's ``host_op_overhead_ns`` (it depends on the CPU and the container as much as on the GPU,
so calibrations override it).  :class:`HostModel` scales that base by the kind of module:

- ``MODULE``: an ordinary layer module (linear, norm, activation, embedding, loss): factor 1;
- ``MOE``: the modules of an MoE block (router, token permute / unpermute, the experts), whose
  token-dispatcher bookkeeping (routing maps, split sizes, host-device syncs for the all-to-all)
  costs more per call and grows with the expert-parallel group: factor
  ``moe_factor * ep ** moe_ep_exponent``;
- ``ATTENTION_CORE``: the unfused attention core (scores, softmax + dropout, context), one module
  call for its kernels: ``attention_core_factor``.

Deterministic mode (Megatron's ``--deterministic-mode``: ``torch.use_deterministic_algorithms``, which
also fills every fresh ``torch.empty`` allocation with NaN, one more kernel to dispatch per output, and
TE's deterministic attention paths) scales every call of a run that sets it by
``deterministic_factor``.

The transformer implementation: a run of Megatron's local modules (``--transformer-impl local``: Megatron's
own parallel linear layers, Apex / PyTorch norms) instead of Transformer Engine's pays
``local_impl_factor`` times the per-call cost, which is TE's.  TE's module call (its autograd function,
FP8 metadata and workspace bookkeeping, userbuffer checks) does more Python than a local module's; the
gap depends on the TE release of the container (fitted per container, docs/workload.md).

The defaults (all 1, exponent 0) reproduce a plain per-call model.  ``tools/accuracy_megatron.py``
fits one HostModel per measured container x system (docs/workload.md)."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from xsim_trace.errors import ConfigError


class HostGroup(enum.Enum):
    MODULE = "module"
    MOE = "moe"
    ATTENTION_CORE = "attention_core"


@dataclass(frozen=True, slots=True)
class HostModel:
    moe_factor: float = 1.0
    moe_ep_exponent: float = 0.0
    attention_core_factor: float = 1.0
    deterministic_factor: float = 1.0
    local_impl_factor: float = 1.0

    def __post_init__(self) -> None:
        for name in ("moe_factor", "attention_core_factor", "deterministic_factor", "local_impl_factor"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"expected a non-negative number, found {value!r}", field=f"host.{name}")
        if not isinstance(self.moe_ep_exponent, (int, float)) or not -4.0 <= self.moe_ep_exponent <= 4.0:
            raise ConfigError(f"expected a number in [-4, 4], found {self.moe_ep_exponent!r}", field="host.moe_ep_exponent")

    def factor(self, group: HostGroup, ep: int = 1, deterministic: bool = False, local_impl: bool = False) -> float:
        """Multiplier of the base per-call host cost for a module of ``group`` at EP degree ``ep``
        in a run with (``deterministic``) or without deterministic mode, on Transformer Engine's
        modules or (``local_impl``) Megatron's local ones."""
        mode = (self.deterministic_factor if deterministic else 1.0) * (self.local_impl_factor if local_impl else 1.0)
        if group is HostGroup.MOE:
            return mode * self.moe_factor * (ep ** self.moe_ep_exponent if self.moe_ep_exponent else 1.0)
        if group is HostGroup.ATTENTION_CORE:
            return mode * self.attention_core_factor
        return mode

    @classmethod
    def from_mapping(cls, raw: "dict[str, float]", *, source: str = "") -> "HostModel":
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ConfigError(f"unknown host model field(s) {', '.join(unknown)}", file=source or None, field="host")
        try:
            return cls(**{k: float(v) for k, v in raw.items()})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"expected numbers: {exc}", file=source or None, field="host") from None
