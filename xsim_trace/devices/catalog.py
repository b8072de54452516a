"""The device catalog: packaged ``data/devices.yaml`` plus optional user files; lookup by any alias."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Mapping


from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.errors import ConfigError

_REQUIRED = ("fp16_tflops", "hbm_bw_GBps", "hbm_GiB")
_FLOAT_FIELDS = (
    "fp16_tflops",
    "bf16_tflops",
    "fp32_tflops",
    "tf32_tflops",
    "fp8_tflops",
    "hbm_bw_GBps",
    "hbm_GiB",
    "nvlink_bidir_GBps",
    "pcie_GBps",
    "gemm_efficiency",
    "attention_efficiency",
    "mem_efficiency",
    "fp8_gemm_efficiency",
    "attention_bwd_efficiency",
)
_INT_FIELDS = ("kernel_overhead_ns", "host_op_overhead_ns", "sms", "attention_half_seq")
_FRACTIONS = ("gemm_efficiency", "attention_efficiency", "mem_efficiency")
_OPTIONAL_FRACTIONS = ("fp8_gemm_efficiency", "attention_bwd_efficiency")  # 0 = derived
_PREFIXES = ("nvidia-", "tesla-", "amd-instinct-", "amd-")


def normalize_name(name: str) -> str:
    """Lower-case, vendor prefixes dropped, runs of space / underscore / dash folded to one dash."""
    key = re.sub(r"[\s_\-]+", "-", str(name).strip().lower())
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return key


@dataclass(frozen=True, slots=True)
class Catalog:
    """Devices by canonical name, and every normalized alias -> canonical name."""

    devices: Mapping[str, DeviceSpec]
    index: Mapping[str, str]

    def names(self) -> list[str]:
        return sorted(self.devices)

    def get(self, name: "str | DeviceSpec") -> DeviceSpec:
        if isinstance(name, DeviceSpec):
            return name
        canonical = self.index.get(normalize_name(name))
        if canonical is None:
            raise ConfigError(
                f"unknown device {name!r}; known devices: {', '.join(self.names())} "
                "(add one in a devices YAML file)",
                field="device",
            )
        return self.devices[canonical]

    def __contains__(self, name: str) -> bool:
        return normalize_name(name) in self.index


def _spec_from_entry(name: str, entry: Any, source: str, base: DeviceSpec | None) -> DeviceSpec:
    where = f"devices.{name}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"expected a mapping of device fields, found {type(entry).__name__}", file=source, field=where)
    known = set(_FLOAT_FIELDS) | set(_INT_FIELDS) | {"vendor", "arch", "aliases", "base", "source"}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ConfigError(f"unknown device field(s) {', '.join(map(str, unknown))}", file=source, field=where)
    values: dict[str, Any] = dataclasses.asdict(base) if base is not None else {}
    values.pop("aliases", None)
    values["name"] = name
    if base is None:
        missing = [f for f in _REQUIRED if f not in entry]
        if missing:
            raise ConfigError(f"missing required field(s) {', '.join(missing)}", file=source, field=where)
    for key in _FLOAT_FIELDS:
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError(f"expected a non-negative number, found {value!r}", file=source, field=f"{where}.{key}")
            if key in _FRACTIONS and not 0 < value <= 1:
                raise ConfigError(f"expected a fraction in (0, 1], found {value!r}", file=source, field=f"{where}.{key}")
            if key in _OPTIONAL_FRACTIONS and value > 1:
                raise ConfigError(f"expected a fraction in [0, 1], found {value!r}", file=source, field=f"{where}.{key}")
            values[key] = float(value)
    for key in _INT_FIELDS:
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"expected a non-negative integer, found {value!r}", file=source, field=f"{where}.{key}")
            values[key] = value
    values["vendor"] = str(entry.get("vendor", values.get("vendor", "unknown")))
    values["arch"] = str(entry.get("arch", values.get("arch", "unknown")))
    values["source"] = str(entry.get("source", values.get("source", "")))
    values.setdefault("bf16_tflops", values["fp16_tflops"])
    values.setdefault("fp32_tflops", 0.0)
    values.setdefault("nvlink_bidir_GBps", 0.0)
    if values["bf16_tflops"] <= 0 and values["fp16_tflops"] <= 0:
        raise ConfigError("a device needs fp16_tflops or bf16_tflops > 0", file=source, field=where)
    if values["hbm_bw_GBps"] <= 0:
        raise ConfigError("expected hbm_bw_GBps > 0", file=source, field=f"{where}.hbm_bw_GBps")
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError("expected a list of strings", file=source, field=f"{where}.aliases")
    values["aliases"] = tuple(aliases)
    return DeviceSpec(**values)


def _parse(text: str, source: str, devices: dict[str, DeviceSpec], index: dict[str, str]) -> None:
    from xsim_trace.io.documents import parse_document

    doc = parse_document(text, source, as_json=False, what="device file")
    if not isinstance(doc, Mapping) or not isinstance(doc.get("devices"), Mapping):
        raise ConfigError("expected a top-level 'devices:' mapping", file=source, field="devices")
    for name, entry in doc["devices"].items():
        name = str(name)
        base = None
        if isinstance(entry, Mapping) and "base" in entry:
            canonical = index.get(normalize_name(str(entry["base"])))
            if canonical is None:
                raise ConfigError(f"base device {entry['base']!r} is not in the catalog", file=source, field=f"devices.{name}.base")
            base = devices[canonical]
        elif normalize_name(name) in index:  # overriding an existing device: start from it
            base = devices[index[normalize_name(name)]]
            name = base.name
        spec = _spec_from_entry(name, entry, source, base)
        if base is not None and base.name == name:
            spec = dataclasses.replace(spec, aliases=base.aliases + spec.aliases)
        devices[name] = spec
        for alias in (name, *spec.aliases):
            key = normalize_name(alias)
            owner = index.get(key)
            if owner is not None and owner != name:
                raise ConfigError(f"alias {alias!r} already names device {owner}", file=source, field=f"devices.{name}.aliases")
            index[key] = name


@functools.lru_cache(maxsize=1)
def _builtin_text() -> str:
    return resources.files("xsim_trace").joinpath("data/devices.yaml").read_text(encoding="utf-8")


def load_catalog(extra_file: "str | os.PathLike[str] | None" = None) -> Catalog:
    """The packaged catalog, plus (if given) a user YAML file of the same shape whose entries add
    devices or override fields of existing ones (``base: H100`` derives a new device from one)."""
    devices: dict[str, DeviceSpec] = {}
    index: dict[str, str] = {}
    _parse(_builtin_text(), "xsim_trace/data/devices.yaml", devices, index)
    if extra_file is not None:
        from xsim_trace.io.documents import read_text

        path = os.fspath(extra_file)
        _parse(read_text(path, "device file"), path, devices, index)
    return Catalog(devices=dict(sorted(devices.items())), index=dict(sorted(index.items())))


@functools.lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return load_catalog()


def catalog_for(device_file: "str | os.PathLike[str] | None" = None) -> Catalog:
    """The one resolver of device names for a run: the built-in catalog, plus the user's
    ``--device-file`` when given.  Commands build it once at their boundary and hand it (or the
    DeviceSpecs it resolves) down to the cluster loader, the generator, the estimate and retargeting."""
    return load_catalog(device_file) if device_file is not None else default_catalog()


def get_device(name: "str | DeviceSpec", catalog: Catalog | None = None) -> DeviceSpec:
    """Look a device up by canonical name or alias (``"H100"``, ``"h100-sxm"``, ``"NVIDIA H100 80GB HBM3"``)."""
    return (catalog or default_catalog()).get(name)
