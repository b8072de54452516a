"""Which per-layer template a stage of a plan is built from.

The rewriter takes either one :class:`ModelTemplate` (measured on one device at one TP degree and
scaled to every stage's device and TP) or a mapping with one template per device group
(``{"h100": t_h100, "a100": t_a100}``) or per (group, TP degree) (``{("h100", 4): t}``).  A stage
takes the template of its (group, tp), else of its group, else the single default; the rewriter
still scales it (the identity when the template was made on the stage's own device and TP).
With the plan's model attached (:meth:`TemplateSet.with_model`), a template measured at TP 1 gains
the TP collectives of the stage's TP degree (:mod:`xsim_trace.layer_templates.tp_collectives`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Union

from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.layer_templates.template import ModelTemplate
from xsim_trace.layer_templates.tp_collectives import at_tp, needs_collectives
from xsim_trace.plan.model_spec import ModelSpec

TemplateKey = Union[str, tuple[str, int]]
Templates = Union[ModelTemplate, Mapping[TemplateKey, ModelTemplate], "TemplateSet"]

#: model-wide sizes every template of one set must agree on
_SHARED = ("activation_bytes", "layer_grad_bytes", "pre_grad_bytes", "post_grad_bytes")


@dataclass(frozen=True)
class TemplateSet:
    by_key: tuple[tuple[TemplateKey, ModelTemplate], ...] = ()
    default: ModelTemplate | None = None
    model: ModelSpec | None = None  # when set, TP-1 templates gain the TP collectives of the stage's TP
    _at_tp: dict = field(default_factory=dict, compare=False, repr=False)  # (id(template), tp) -> template

    def with_model(self, model: ModelSpec) -> "TemplateSet":
        """This set adding the TP collectives ``model`` runs at each stage's TP degree."""
        if self.model == model:
            return self
        return dataclasses.replace(self, model=model, _at_tp={})

    @property
    def base(self) -> ModelTemplate:
        """The template model-wide sizes (boundary activation, gradients) are read from."""
        return self.default if self.default is not None else self.by_key[0][1]

    def for_stage(self, group: str, tp: int) -> ModelTemplate:
        keys = dict(self.by_key)
        found = keys.get((group, tp)) or keys.get(group) or self.default
        if found is None:
            raise ConfigError(f"no template for device group {group!r} at TP {tp} (templates for: "
                              f"{', '.join(_key_text(k) for k, _ in self.by_key)})", field="templates")
        if self.model is None or not needs_collectives(found, tp):
            return found
        key = (id(found), tp)
        if key not in self._at_tp:
            try:
                self._at_tp[key] = at_tp(found, tp, self.model)
            except XsimError as exc:
                raise ConfigError(f"device group {group!r} at TP {tp}: the template was measured at TP {found.tp} and "
                                  f"its TP collectives cannot be added: {exc.message}", field="templates") from None
        return self._at_tp[key]

    @property
    def source(self) -> str:
        if self.default is not None and not self.by_key:
            return self.default.source
        return ", ".join(f"{_key_text(k)}={t.source}" for k, t in self.by_key)


def _key_text(key: TemplateKey) -> str:
    return f"{key[0]}/tp{key[1]}" if isinstance(key, tuple) else str(key)


def as_template_set(templates: Templates, model: ModelSpec | None = None) -> TemplateSet:
    """A :class:`TemplateSet` from one template, a mapping (group or (group, tp) -> template) or a set;
    with ``model`` (the plan's), TP-1 templates gain the TP collectives of each stage's TP."""
    tset = _as_set(templates)
    return tset.with_model(model) if model is not None else tset


def _as_set(templates: Templates) -> TemplateSet:
    if isinstance(templates, TemplateSet):
        return templates
    if isinstance(templates, ModelTemplate):
        return TemplateSet(default=templates)
    if not isinstance(templates, Mapping) or not templates:
        raise ConfigError(f"expected a ModelTemplate or a non-empty mapping of them, found {type(templates).__name__}",
                          field="templates")
    items = []
    for key, t in templates.items():
        ok_key = isinstance(key, str) or (isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str)
                                          and isinstance(key[1], int))
        if not ok_key or not isinstance(t, ModelTemplate):
            raise ConfigError(f"expected group name or (group, tp) -> ModelTemplate, found {key!r} -> {type(t).__name__}",
                              field="templates")
        items.append((key, t))
    first = items[0][1]
    for key, t in items[1:]:
        for name in _SHARED:
            if getattr(t, name) != getattr(first, name):
                raise ConfigError(f"template {_key_text(key)} has {name} {getattr(t, name)}, "
                                  f"{_key_text(items[0][0])} has {getattr(first, name)}: not one model", field="templates")
    return TemplateSet(by_key=tuple(items))


__all__ = ["TemplateKey", "TemplateSet", "Templates", "as_template_set"]
