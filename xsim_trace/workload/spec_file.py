"""A generator spec file (YAML/JSON): model, framework parameters and the system to time them on.

    model: llama2-7b            # a preset name, or a mapping of ModelSpec fields (``base:`` allowed)
    framework: {tp: 2, pp: 2, dp: 2, micro_batch: 1, global_batch: 16, sequence_parallel: true}
    system: {device: H100, gpus_per_node: 8, nic_gbps_per_gpu: 400, framework: megatron-core}
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping


from xsim_trace.devices.catalog import catalog_for
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError, XsimError
from xsim_trace.workload.comm import LinkModel
from xsim_trace.workload.families import FrameworkFamily, get_family
from xsim_trace.workload.framework import Framework
from xsim_trace.workload.model import ModelSpec, get_model
from xsim_trace.workload.program import Program
from xsim_trace.workload.timing import Timer

_FW_FIELDS = {f.name for f in dataclasses.fields(Framework)}
_MODEL_FIELDS = {f.name for f in dataclasses.fields(ModelSpec)}
_SYSTEM_FIELDS = {"device", "gpus_per_node", "nic_gbps_per_gpu", "device_file", "framework"}


@dataclass(frozen=True)
class Setup:
    program: Program
    timer: Timer

    @property
    def model(self) -> ModelSpec:
        return self.program.model

    @property
    def fw(self) -> Framework:
        return self.program.fw

    @property
    def device(self) -> DeviceSpec:
        return self.timer.device

    @property
    def family(self) -> "FrameworkFamily | None":
        return self.timer.family


def make_setup(
    model: "ModelSpec | str",
    fw: Framework,
    device: "DeviceSpec | str" = "H100",
    *,
    gpus_per_node: int = 8,
    nic_gbps_per_gpu: float = 400.0,
    device_file: "str | os.PathLike[str] | None" = None,
    framework: "str | FrameworkFamily | None" = None,
    intra_GBps: float | None = None,  # noqa: N803
) -> Setup:
    """Resolve names once: the model, the device (built-in catalog plus ``device_file``) and the
    framework family (default :data:`~xsim_trace.workload.families.DEFAULT_FAMILY`).  ``intra_GBps``:
    the intra-node rate per GPU per direction (a cluster's; default the device's NVLink)."""
    dev = catalog_for(device_file).get(device)
    family = get_family(framework)
    program = Program(get_model(model), fw)
    links = LinkModel.for_device(dev, gpus_per_node, nic_gbps_per_gpu, intra_GBps)
    return Setup(program, Timer(dev, links, fw, family=family))


def _model(raw: Any, source: str) -> ModelSpec:
    if isinstance(raw, str):
        return get_model(raw)
    if not isinstance(raw, Mapping):
        raise ConfigError("expected a preset name or a mapping of model fields", file=source, field="model")
    raw = dict(raw)
    base = raw.pop("base", None)
    unknown = sorted(set(raw) - _MODEL_FIELDS)
    if unknown:
        raise ConfigError(f"unknown model field(s) {', '.join(unknown)}", file=source, field="model")
    try:
        if base is not None:
            return get_model(base).with_(**raw)
        raw.setdefault("name", "custom")
        return ModelSpec(**raw)
    except TypeError as exc:
        raise ConfigError(f"incomplete model: {exc}", file=source, field="model") from None


def load_spec_file(path: "str | os.PathLike[str]", *, device_file: "str | os.PathLike[str] | None" = None) -> Setup:
    """A generator spec file; ``device_file`` (the command's ``--device-file``) is the run's extra
    devices, else the file's own ``system.device_file``."""
    from xsim_trace.io.documents import load_document

    p = os.fspath(path)
    doc = load_document(p, "spec file", as_json=p.endswith(".json"))
    if not isinstance(doc, Mapping) or "model" not in doc:
        raise ConfigError("expected a mapping with 'model', 'framework' and optional 'system'", file=p)
    fw_raw = doc.get("framework") or {}
    sys_raw = doc.get("system") or {}
    for name, raw, allowed in (("framework", fw_raw, _FW_FIELDS), ("system", sys_raw, _SYSTEM_FIELDS)):
        if not isinstance(raw, Mapping):
            raise ConfigError("expected a mapping", file=p, field=name)
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ConfigError(f"unknown {name} field(s) {', '.join(map(str, unknown))}", file=p, field=name)
    try:
        model = _model(doc["model"], p)
        fw = Framework(**fw_raw)
        return make_setup(
            model,
            fw,
            sys_raw.get("device", "H100"),
            gpus_per_node=int(sys_raw.get("gpus_per_node", 8)),
            nic_gbps_per_gpu=float(sys_raw.get("nic_gbps_per_gpu", 400.0)),
            device_file=device_file if device_file is not None else sys_raw.get("device_file"),
            framework=sys_raw.get("framework"),
        )
    except XsimError as exc:
        if "file" in exc.context:
            raise
        raise type(exc)(exc.message, file=p, **exc.context) from None
