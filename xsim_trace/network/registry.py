"""Backends by name: ``make_backend(name, topology, **options)``, ``available_backends()``,
``register_backend(name, factory)``.

Built in: ``analytical``, ``analytical-ca``, ``flow``.  ``ns3`` is registered lazily from
:mod:`xsim_trace.network.ns3_backend` (its factory raises BackendError with the install hint when
the optional extra is missing).  A factory is ``factory(topology, **options) -> NetworkBackend``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from xsim_trace.errors import BackendError
from xsim_trace.network.protocol import NetworkBackend

#: ``factory(topology, **options) -> NetworkBackend``
Factory = Callable[..., NetworkBackend]

_FACTORIES: dict[str, Factory] = {}
#: name -> (module, factory attribute, python package whose presence makes it available)
_LAZY: dict[str, tuple[str, str, str | None]] = {
    "ns3": ("xsim_trace.network.ns3_backend", "make_ns3_backend", "ns3"),
}


def register_backend(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Make ``factory`` available as ``make_backend(name, ...)``."""
    key = normalise_name(name)
    if not key:
        raise BackendError("expected a backend name, found an empty string", field="backend")
    if not callable(factory):
        raise BackendError(f"backend {name!r}: expected a callable factory, found {factory!r}", field="backend")
    if key in _FACTORIES and _FACTORIES[key] is not factory and not replace:
        raise BackendError(f"backend {key!r} is already registered", field="backend")
    _FACTORIES[key] = factory


def _resolve(key: str) -> Factory | None:
    f = _FACTORIES.get(key)
    if f is None and key in _LAZY:
        mod, attr, _ = _LAZY[key]
        try:
            module = importlib.import_module(mod)
        except ImportError as exc:
            raise BackendError(f"backend {key!r} cannot be loaded: {exc}", field="backend") from exc
        f = _FACTORIES.get(key) or getattr(module, attr, None)
        if f is not None:
            _FACTORIES.setdefault(key, f)
    return f


def available_backends() -> list[str]:
    """Names ``make_backend`` accepts here: registered ones, plus lazy ones whose package is installed."""
    names = set(_FACTORIES)
    for key, (_, _, pkg) in _LAZY.items():
        if pkg is None or importlib.util.find_spec(pkg) is not None:
            names.add(key)
    return sorted(names)


def known_backends() -> list[str]:
    """Every name, installed or not."""
    return sorted(set(_FACTORIES) | set(_LAZY))


def normalise_name(name: str) -> str:
    """Backend names are case-insensitive and ``_`` is read as ``-`` (``analytical_ca`` = ``analytical-ca``)."""
    return str(name).strip().lower().replace("_", "-")


def make_backend(name: str, topology: Any, **options: Any) -> NetworkBackend:
    """A new backend ``name`` over ``topology`` (a Topology or a topology-like object, see adapt.py);
    its optional capabilities are in ``capabilities_of(backend)``."""
    key = normalise_name(name)
    factory = _resolve(key)
    if factory is None:
        raise BackendError(f"unknown network backend {name!r} (known: {', '.join(known_backends())})", field="backend")
    try:
        return factory(topology, **options)
    except TypeError as exc:
        raise BackendError(f"backend {key!r}: bad options {sorted(options)}: {exc}", field="backend") from exc


def _builtin() -> None:
    from xsim_trace.network.adapt import as_topology  # noqa: PLC0415
    from xsim_trace.network.analytical import AnalyticalBackend  # noqa: PLC0415
    from xsim_trace.network.analytical_ca import AnalyticalCongestionAwareBackend  # noqa: PLC0415
    from xsim_trace.network.flowlevel import FlowLevelBackend  # noqa: PLC0415

    def factory(cls: type) -> Factory:
        def make(topology: Any, **options: Any) -> NetworkBackend:
            return cls(as_topology(topology), **options)

        make.__name__ = f"make_{cls.__name__}"
        make.__doc__ = cls.__doc__
        return make

    for cls in (AnalyticalBackend, AnalyticalCongestionAwareBackend, FlowLevelBackend):
        register_backend(cls.name, factory(cls), replace=True)


_builtin()
