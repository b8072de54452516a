"""Guard rails: a trace, a plan and a cluster must describe the same workload and devices.

A trace generated for sequence length 4096 and rewritten for a plan of 2048 gives a step that is wrong by the ratio, with no sign of it.  These checks
compare what the trace's metadata says it was computed for (``seq_len``, ``micro_batch_size``,
``device_name``) with the plan and ``--device`` and raise a :class:`ConfigError` naming both values.
Traces without the metadata (older captures) pass; callers offer a flag to skip the checks.
"""

from __future__ import annotations

from xsim_trace.devices import get_device
from xsim_trace.devices.catalog import Catalog
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.graph import attrs as A
from xsim_trace.graph.model import Trace
from xsim_trace.plan.model_spec import ModelSpec


def _meta_int(trace: Trace, name: str) -> int | None:
    v = trace.metadata.attr(name)
    return int(v) if v is not None else None


def check_trace_shape(trace: Trace, model: ModelSpec, *, source: str, flag: str) -> None:
    """The trace's sequence length and micro-batch size equal the plan model's."""
    for name, want, plan_field in ((A.META_SEQ_LEN, model.seq_len, "model.seq_len"),
                                   (A.META_MICRO_BATCH, model.micro_batch_size, "model.micro_batch_size")):
        got = _meta_int(trace, name)
        if got is not None and got != want:
            raise ConfigError(f"the trace was made for {name} {got}, the plan's {plan_field} is {want} "
                              f"(regenerate the trace or pass {flag})", file=source, field=name)


def _canonical(name: str, catalog: Catalog | None) -> str:
    try:
        return get_device(name, catalog).name
    except XsimError:
        return name


def check_source_device(trace: Trace, device: "DeviceSpec | str | None", *, source: str, flag: str,
                        catalog: Catalog | None = None) -> None:
    """A ``--device`` given for a trace agrees with the device the trace names (a name resolves in
    ``catalog``, the run's device catalog; None = the built-in one)."""
    named = trace.metadata.attr(A.META_DEVICE)
    if not device or not named:
        return
    want = device.name if isinstance(device, DeviceSpec) else _canonical(device, catalog)
    got = _canonical(str(named), catalog)
    if got != want:
        raise ConfigError(f"the trace was measured on {got}, --device says {want} "
                          f"(pass {flag} to time it as {want})", file=source, field="--device")
