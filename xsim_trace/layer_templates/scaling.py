"""Template op times on a stage's device and TP degree (through the device catalog)."""

from __future__ import annotations

from xsim_trace.devices import scale_kernel_ns, tp_scale_ns
from xsim_trace.devices.spec import DeviceSpec
from xsim_trace.layer_templates.template import LayerTemplate, ModelTemplate, OpTemplate


def op_time_ns(op: OpTemplate, template: ModelTemplate, device: DeviceSpec, tp: int) -> int:
    """Time of a compute op measured on (template.device_spec, template.tp) when run on (device, tp)."""
    t = scale_kernel_ns(op.duration_ns, template.device_spec, device, op.kernel_class,
                        flops=op.flops or None, bytes=op.bytes_accessed or None)
    if op.tp_sharded and tp != template.tp:
        t = tp_scale_ns(t, template.tp, tp, op.kernel_class, device=device,
                        flops=op.flops or None, bytes=op.bytes_accessed or None)
    return int(t)


def layer_compute_ns(layer: LayerTemplate, template: ModelTemplate, device: DeviceSpec, tp: int) -> int:
    """Forward + backward compute of one layer (one micro-batch) on (device, tp)."""
    return sum(op_time_ns(o, template, device, tp) for o in layer.fwd + layer.bwd if o.kind == "comp")


def mean_layer_ns(template: ModelTemplate, num_layers: int, device: DeviceSpec, tp: int) -> int:
    total = sum(layer_compute_ns(template.layer(i), template, device, tp) for i in range(min(num_layers, len(template.layers))))
    return max(1, total // min(num_layers, len(template.layers)))
