"""Replay settings: collective algorithms, chunking and endpoint delays (a frozen, validated config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from xsim_trace.errors import ConfigError
from xsim_trace.graph.kinds import CollectiveType

#: algorithm names the replayer implements
ALGORITHMS = ("ring", "tree", "direct", "halving_doubling", "hierarchical")

_ALIASES = {
    "ring": "ring",
    "tree": "tree",
    "double_binary_tree": "tree",
    "doublebinarytree": "tree",
    "dbt": "tree",
    "direct": "direct",
    "halving_doubling": "halving_doubling",
    "halvingdoubling": "halving_doubling",
    "hd": "halving_doubling",
    "rhd": "halving_doubling",
    "hierarchical": "hierarchical",
    "hier": "hierarchical",
    "nvlink_ring": "hierarchical",
}

P2P_MODES = ("eager", "rendezvous")

#: default algorithm per collective type
DEFAULT_ALGORITHMS: dict[CollectiveType, str] = {
    CollectiveType.ALL_REDUCE: "ring",
    CollectiveType.REDUCE: "ring",
    CollectiveType.ALL_GATHER: "ring",
    CollectiveType.GATHER: "direct",
    CollectiveType.SCATTER: "direct",
    CollectiveType.BROADCAST: "ring",
    CollectiveType.ALL_TO_ALL: "direct",
    CollectiveType.REDUCE_SCATTER: "ring",
    CollectiveType.REDUCE_SCATTER_BLOCK: "ring",
    CollectiveType.BARRIER: "direct",
}


def algorithm_name(text: str, field_name: str = "algorithm") -> str:
    key = text.strip().lower().replace("-", "_")
    if key not in _ALIASES:
        raise ConfigError(f"expected one of {', '.join(ALGORITHMS)}, found {text!r}", field=field_name)
    return _ALIASES[key]


def collective_type(text: str, field_name: str = "algorithm") -> CollectiveType:
    key = text.strip().upper().replace("-", "_")
    try:
        return CollectiveType[key]
    except KeyError:
        names = ", ".join(t.name.lower() for t in CollectiveType)
        raise ConfigError(f"expected a collective type ({names}), found {text!r}", field=field_name) from None


#: what prices a collective the engine prices whole (see ReplaySettings.collective_model)
COLLECTIVE_MODELS = ("auto", "nccl", "schedule")


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """How collectives become flows.

    ``chunks``: each collective is split into this many equal chunks; ``in_flight``: how many chunks
    of one collective a rank works on at once (chunk c starts on a rank when its chunk c-in_flight
    is done there); ``endpoint_delay_ns``: added before every send a rank issues inside a collective
    or p2p transfer and once when a rank finishes a chunk; ``reduction_delay_ns``: added after each
    receive that must be reduced (reduce-scatter steps) before the data is used.
    ``p2p``: ``eager`` (a send moves its data as soon as it starts and completes when the data has
    arrived; a receive completes when it has started and the data is there, as ASTRA-sim does) or
    ``rendezvous`` (the data moves once both sides have started; both complete together).
    """

    algorithms: Mapping[CollectiveType, str] = field(default_factory=lambda: dict(DEFAULT_ALGORITHMS))
    chunks: int = 1
    in_flight: int = 1
    endpoint_delay_ns: int = 0
    reduction_delay_ns: int = 0
    p2p: str = "eager"
    #: what prices a collective that the engine prices whole (a closed-form backend: ``analytical``):
    #: ``nccl`` (xsim_trace.network.nccl: NCCL's algorithm and protocol choice; ``nccl_algo`` /
    #: ``nccl_proto`` force them like NCCL_ALGO / NCCL_PROTO), ``schedule`` (walk the configured
    #: algorithm's chunk schedule over the backend), or ``auto`` (the default): ``nccl`` when a resolved
    #: cluster is given and the schedule is left at its defaults (no algorithm, chunking or delay set),
    #: else ``schedule``.  Backends that run collectives as flows run the model's price as paced flows
    #: (:mod:`xsim_trace.replay.model_flows`).  :meth:`resolved` gives the model a replay used.
    collective_model: str = "auto"
    nccl_algo: str | None = None
    nccl_proto: str | None = None

    def __post_init__(self) -> None:
        if self.collective_model not in COLLECTIVE_MODELS:
            raise ConfigError(f"expected one of {', '.join(COLLECTIVE_MODELS)}, found {self.collective_model!r}",
                              field="collective_model")
        if self.collective_model == "schedule" and (self.nccl_algo or self.nccl_proto):
            raise ConfigError("NCCL algorithm / protocol forcing needs collective_model nccl", field="nccl_algo")
        if self.nccl_algo or self.nccl_proto:  # (the NCCL model's package loads only where it is used)
            from xsim_trace.network.nccl.kinds import Algo, Proto  # noqa: PLC0415

            if self.nccl_algo:
                object.__setattr__(self, "nccl_algo", Algo.parse(self.nccl_algo, field="nccl_algo").value)
            if self.nccl_proto:
                object.__setattr__(self, "nccl_proto", Proto.parse(self.nccl_proto, field="nccl_proto").value)
        if self.p2p not in P2P_MODES:
            raise ConfigError(f"expected one of {', '.join(P2P_MODES)}, found {self.p2p!r}", field="p2p")
        for name in ("chunks", "in_flight"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"expected a positive whole number, found {v!r}", field=name)
        for name in ("endpoint_delay_ns", "reduction_delay_ns"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"expected a whole number of ns >= 0, found {v!r}", field=name)
        merged = dict(DEFAULT_ALGORITHMS)
        for ctype, algo in dict(self.algorithms).items():
            merged[CollectiveType(ctype)] = algorithm_name(algo, f"algorithms.{CollectiveType(ctype).name.lower()}")
        object.__setattr__(self, "algorithms", merged)

    def schedule_is_default(self) -> bool:
        """True when nothing of the collective schedule was configured (algorithms, chunks, delays)."""
        return (self.algorithms == DEFAULT_ALGORITHMS and self.chunks == 1 and self.in_flight == 1
                and self.endpoint_delay_ns == 0 and self.reduction_delay_ns == 0)

    def wants_nccl(self) -> bool:
        """Whether collectives priced whole should use the NCCL model (before asking the backend)."""
        if self.collective_model == "auto":
            return bool(self.nccl_algo or self.nccl_proto) or self.schedule_is_default()
        return self.collective_model == "nccl"

    def resolved(self, model: str) -> "ReplaySettings":
        """These settings with ``collective_model`` set to the model a replay used (nccl or schedule)."""
        from dataclasses import replace  # noqa: PLC0415

        return self if self.collective_model == model else replace(self, collective_model=model)

    def algorithm_for(self, ctype: int) -> str:
        try:
            return self.algorithms[CollectiveType(ctype)]
        except ValueError:
            return "direct"

    @classmethod
    def from_cli(
        cls,
        algorithm_specs: list[str] | None = None,
        *,
        chunks: int = 1,
        in_flight: int = 1,
        endpoint_delay_ns: int = 0,
        reduction_delay_ns: int = 0,
        p2p: str = "eager",
        collective_model: str = "auto",
        nccl_algo: str | None = None,
        nccl_proto: str | None = None,
    ) -> "ReplaySettings":
        """Build from ``--algorithm`` values: ``ring`` (every collective) or ``all_reduce=tree``."""
        algos: dict[CollectiveType, str] = {}
        for spec in algorithm_specs or []:
            if "=" in spec:
                ctype_text, algo = spec.split("=", 1)
                ctype = collective_type(ctype_text)
                algos[ctype] = algorithm_name(algo, f"algorithm.{ctype.name.lower()}")
            else:
                algo = algorithm_name(spec)
                for ctype in CollectiveType:
                    algos[ctype] = algo
        return cls(
            algorithms=algos,
            chunks=chunks,
            in_flight=in_flight,
            endpoint_delay_ns=endpoint_delay_ns,
            reduction_delay_ns=reduction_delay_ns,
            p2p=p2p,
            collective_model=collective_model,
            nccl_algo=nccl_algo,
            nccl_proto=nccl_proto,
        )

    def to_json(self) -> dict:
        return {
            "algorithms": {t.name.lower(): self.algorithms[t] for t in CollectiveType},
            "chunks": self.chunks,
            "in_flight": self.in_flight,
            "endpoint_delay_ns": self.endpoint_delay_ns,
            "reduction_delay_ns": self.reduction_delay_ns,
            "p2p": self.p2p,
            "collective_model": self.collective_model,
        } | ({"nccl_algo": self.nccl_algo, "nccl_proto": self.nccl_proto} if self.nccl_algo or self.nccl_proto else {})
