"""Transformer model geometry: presets (packaged YAML) and user model files."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping


from xsim_trace.errors import ConfigError

_INT_FIELDS = ("layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "seq_len", "moe_experts", "moe_top_k", "moe_ffn",
               "moe_shared_experts", "moe_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_dim", "qk_nope_dim",
               "v_head_dim")
_BOOL_FIELDS = ("swiglu", "flash_attention", "tied_embeddings", "bias", "causal")
_NORMS = ("layernorm", "rmsnorm")
#: Megatron's ``--position-embedding-type`` choices the generator models: rotary (applied to q and k in
#: every layer), a learned absolute table added to the word embedding (Megatron's default), or none
POSITION_EMBEDDINGS = ("rope", "learned_absolute", "none")
_STR_FIELDS = ("norm", "position_embedding")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A decoder-only (or encoder-only) transformer.  ``kv_heads`` < ``heads`` is grouped-query
    attention; ``moe_experts`` > 0 replaces every layer's MLP by that many experts, ``moe_top_k``
    active per token, each of width ``moe_ffn`` (default ``ffn``)."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    vocab: int
    seq_len: int
    kv_heads: int = 0  # 0 = same as heads
    swiglu: bool = False
    flash_attention: bool = True
    moe_experts: int = 0
    moe_top_k: int = 1
    moe_ffn: int = 0  # 0 = same as ffn
    tied_embeddings: bool = True
    norm: str = "layernorm"
    bias: bool = True
    causal: bool = True
    moe_shared_experts: int = 0
    moe_dense_layers: int = 0  # the first layers with a dense MLP (DeepSeek-V3: 3)
    q_lora_rank: int = 0
    kv_lora_rank: int = 0  # > 0: multi-latent attention
    qk_rope_dim: int = 0
    qk_nope_dim: int = 0
    v_head_dim: int = 0
    #: ``rope`` (default: the presets' Llama / Mixtral / Qwen / DeepSeek), ``learned_absolute`` (GPT-3,
    #: BERT, Megatron's default) or ``none``; multi-latent attention always rotates its RoPE part
    position_embedding: str = "rope"

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "ffn", "heads", "vocab", "seq_len"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ConfigError(f"expected a positive integer, found {v!r}", field=f"model.{f}")
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.moe_ffn == 0:
            object.__setattr__(self, "moe_ffn", self.ffn)
        if self.hidden % self.heads:
            raise ConfigError(f"hidden {self.hidden} is not divisible by heads {self.heads}", field="model.heads")
        if self.kv_heads <= 0 or self.heads % self.kv_heads:
            raise ConfigError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}", field="model.kv_heads")
        if self.moe_experts < 0 or (self.moe_experts and not 1 <= self.moe_top_k <= self.moe_experts):
            raise ConfigError(
                f"expected 1 <= moe_top_k <= moe_experts, found top-k {self.moe_top_k} of {self.moe_experts}",
                field="model.moe_top_k",
            )
        if not 0 <= self.moe_dense_layers <= self.layers or (self.moe_dense_layers and not self.moe_experts):
            raise ConfigError(f"expected 0 <= moe_dense_layers <= layers on an MoE model, found {self.moe_dense_layers}",
                              field="model.moe_dense_layers")
        if self.kv_lora_rank and min(self.qk_nope_dim, self.qk_rope_dim, self.v_head_dim) <= 0:
            raise ConfigError("multi-latent attention needs positive qk_nope_dim, qk_rope_dim and v_head_dim",
                              field="model.kv_lora_rank")
        if self.norm not in _NORMS:
            raise ConfigError(f"expected norm one of {', '.join(_NORMS)}, found {self.norm!r}", field="model.norm")
        if self.position_embedding not in POSITION_EMBEDDINGS:
            raise ConfigError(f"expected position_embedding one of {', '.join(POSITION_EMBEDDINGS)}, "
                              f"found {self.position_embedding!r}", field="model.position_embedding")
        if self.kv_lora_rank and self.position_embedding != "rope":
            raise ConfigError(f"multi-latent attention rotates its qk_rope_dim part: expected position_embedding "
                              f"rope, found {self.position_embedding!r}", field="model.position_embedding")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_hidden(self) -> int:
        """Width of K (and of V) per token as attention sees it (MLA: all heads, up-projected)."""
        if self.is_mla:
            return self.heads * self.qk_head_dim
        return self.kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_dim + self.qk_rope_dim if self.is_mla else self.head_dim

    @property
    def v_dim(self) -> int:
        """Value (and attention output) dims per head."""
        return self.v_head_dim if self.is_mla else self.head_dim

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.moe_dense_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.moe_dense_layers if self.is_moe else 0

    def with_(self, **changes: Any) -> "ModelSpec":
        return dataclasses.replace(self, **changes)

    # -- parameter counts (whole model, unsharded) ------------------------------------------------
    def attention_params(self) -> int:
        h = self.hidden
        if self.is_mla:
            a = self.heads
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * self.qk_head_dim \
                if self.q_lora_rank else h * a * self.qk_head_dim
            kv = h * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank \
                + self.kv_lora_rank * a * (self.qk_nope_dim + self.v_head_dim)
            return q + kv + a * self.v_head_dim * h
        p = h * (h + 2 * self.kv_hidden) + h * h
        if self.bias:
            p += h + 2 * self.kv_hidden + h
        return p

    def mla_replicated_params(self) -> int:
        """Multi-latent attention parameters every TP rank holds whole: the query and KV down
        projections and their norms (0 without MLA)."""
        if not self.is_mla:
            return 0
        q = self.hidden * self.q_lora_rank + self.q_lora_rank
        return q + self.hidden * (self.kv_lora_rank + self.qk_rope_dim) + self.kv_lora_rank

    def mlp_params(self, ffn: int | None = None) -> int:
        f = ffn or self.ffn
        mats = 3 if self.swiglu else 2
        p = mats * self.hidden * f
        if self.bias:
            p += (2 if self.swiglu else 1) * f + self.hidden
        return p

    def norm_params(self) -> int:
        return 2 * self.hidden * (2 if self.norm == "layernorm" else 1)

    def layer_params(self, moe: bool | None = None) -> int:
        """Parameters of one layer (all experts counted for MoE; router included); ``moe`` picks a
        dense or an MoE layer of a model that has both (default: MoE on an MoE model)."""
        if self.is_moe if moe is None else moe:
            experts = self.moe_experts + self.moe_shared_experts
            mlp = experts * self.mlp_params(self.moe_ffn) + self.hidden * self.moe_experts
        else:
            mlp = self.mlp_params()
        return self.attention_params() + mlp + self.norm_params()

    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def total_params(self) -> int:
        layers = self.moe_layers * self.layer_params(True) + (self.layers - self.moe_layers) * self.layer_params(False)
        return layers + self.embedding_params() + self.hidden


def _model_from_entry(name: str, entry: Any, source: str) -> ModelSpec:
    where = f"models.{name}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"expected a mapping of model fields, found {type(entry).__name__}", file=source, field=where)
    allowed = set(_INT_FIELDS) | set(_BOOL_FIELDS) | set(_STR_FIELDS) | {"base"}
    unknown = sorted(set(map(str, entry)) - allowed)
    if unknown:
        raise ConfigError(f"unknown model field(s) {', '.join(unknown)}", file=source, field=where)
    values: dict[str, Any] = {"name": name}
    for key, value in entry.items():
        if key == "base":
            continue
        if key in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"expected an integer, found {value!r}", file=source, field=f"{where}.{key}")
        if key in _BOOL_FIELDS and not isinstance(value, bool):
            raise ConfigError(f"expected true or false, found {value!r}", file=source, field=f"{where}.{key}")
        values[key] = value
    try:
        return ModelSpec(**values)
    except TypeError as exc:
        raise ConfigError(f"incomplete model: {exc}", file=source, field=where) from None
    except ConfigError as exc:
        raise ConfigError(exc.message, file=source, field=f"{where}.{exc.context.get('field', '').removeprefix('model.')}") from None


def _parse(text: str, source: str, into: dict[str, ModelSpec], aliases: dict[str, str]) -> None:
    from xsim_trace.io.documents import parse_document

    doc = parse_document(text, source, as_json=False, what="model file")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("models"), Mapping):
        raise ConfigError("expected a top-level 'models:' mapping", file=source, field="models")
    for name, entry in doc["models"].items():
        name = str(name)
        if isinstance(entry, Mapping) and "base" in entry:
            base_name = str(entry["base"]).lower()
            base = into.get(aliases.get(base_name, base_name))
            if base is None:
                raise ConfigError(f"base model {entry['base']!r} is not known", file=source, field=f"models.{name}.base")
            merged = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.name != "name"}
            merged.update({k: v for k, v in entry.items() if k != "base"})
            entry = merged
        into[name.lower()] = _model_from_entry(name.lower(), entry, source)
    for alias, target in (doc.get("aliases") or {}).items():
        aliases[str(alias).lower()] = str(target).lower()


@functools.lru_cache(maxsize=1)
def _presets() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    models: dict[str, ModelSpec] = {}
    aliases: dict[str, str] = {}
    text = resources.files("xsim_trace").joinpath("data/models/presets.yaml").read_text(encoding="utf-8")
    _parse(text, "xsim_trace/data/models/presets.yaml", models, aliases)
    return models, aliases


def list_models() -> list[str]:
    return sorted(_presets()[0])


def load_model_file(path: "str | os.PathLike[str]") -> dict[str, ModelSpec]:
    """Models defined in a user YAML file (``models: {name: {fields...}}``; ``base: llama3-8b`` derives)."""
    models, aliases = _presets()
    into = dict(models)
    al = dict(aliases)
    from xsim_trace.io.documents import read_text

    p = os.fspath(path)
    text = read_text(p, "model file")
    before = set(into)
    _parse(text, p, into, al)
    doc_names = [n for n in into if n not in before or into[n] is not models.get(n)]
    return {n: into[n] for n in sorted(doc_names)}


def get_model(name: "str | ModelSpec", model_file: "str | os.PathLike[str] | None" = None) -> ModelSpec:
    """A preset by name or alias (case-insensitive), or a model from ``model_file``."""
    if isinstance(name, ModelSpec):
        return name
    key = str(name).lower()
    if model_file is not None:
        extra = load_model_file(model_file)
        if key in extra:
            return extra[key]
    models, aliases = _presets()
    key = aliases.get(key, key)
    if key not in models:
        raise ConfigError(f"unknown model {name!r}; presets: {', '.join(sorted(models))}", field="model")
    return models[key]
