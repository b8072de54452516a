"""Device catalog: aliases, spec-sheet values, user files, errors; compute model numbers by hand."""

from __future__ import annotations

import pytest

from xsim_trace.devices import (
    KernelClass,
    Precision,
    classify_kernel,
    get_device,
    kernel_time_ns,
    load_catalog,
    scale_kernel_ns,
    tp_scale_ns,
)
from xsim_trace.errors import ConfigError


@pytest.mark.parametrize(
    "alias, canonical",
    [
        ("H100", "H100-SXM5-80GB"),
        ("h100-sxm", "H100-SXM5-80GB"),
        ("H100 SXM", "H100-SXM5-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIE-80GB"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("a100", "A100-SXM4-80GB"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("h200", "H200-SXM-141GB"),
        ("B200", "B200-SXM-180GB"),
        ("AMD Instinct MI300X", "MI300X"),
    ],
)
def test_aliases_resolve(alias, canonical):
    assert get_device(alias).name == canonical


def test_spec_sheet_values():
    h100 = get_device("H100")
    assert h100.peak_flops("bf16") == pytest.approx(989.4e12)
    assert h100.peak_flops(Precision.FP8) == pytest.approx(1978.9e12)
    assert h100.hbm_bw_GBps == 3350 and h100.hbm_GiB == 80 and h100.nvlink_bidir_GBps == 900
    assert h100.nvlink_unidir_GBps == 450
    a100 = get_device("A100-40GB")
    assert a100.peak_flops("bf16") == pytest.approx(312e12)
    assert a100.peak_flops("fp8") == pytest.approx(312e12)  # no fp8 on Ampere: falls back to bf16
    assert a100.hbm_bw_GBps == 1555
    v100 = get_device("V100")
    assert v100.peak_flops("bf16") == pytest.approx(125e12)  # Volta: bf16 falls back to fp16
    assert get_device("MI300X").hbm_GiB == 192
    assert get_device("H200").hbm_bw_GBps == 4800


def test_unknown_device_lists_known():
    with pytest.raises(ConfigError, match="unknown device 'K80'.*H100-SXM5-80GB"):
        get_device("K80")


def test_user_file_adds_and_overrides(tmp_path):
    f = tmp_path / "devs.yaml"
    f.write_text(
        "devices:\n"
        "  H100-derated:\n    base: H100\n    gemm_efficiency: 0.5\n    aliases: [h100d]\n"
        "  H100:\n    host_op_overhead_ns: 7000\n"
        "  L4:\n    fp16_tflops: 121\n    hbm_bw_GBps: 300\n    hbm_GiB: 24\n    aliases: [NVIDIA L4]\n"
    )
    cat = load_catalog(f)
    d = cat.get("h100d")
    assert d.gemm_efficiency == 0.5 and d.bf16_tflops == 989.4
    assert cat.get("NVIDIA H100 80GB HBM3").host_op_overhead_ns == 7000
    assert cat.get("nvidia l4").peak_flops("bf16") == pytest.approx(121e12)


@pytest.mark.parametrize(
    "text, match",
    [
        ("devices:\n  X:\n    hbm_bw_GBps: 1\n    hbm_GiB: 1\n", "missing required field"),
        ("devices:\n  X:\n    fp16_tflops: -3\n    hbm_bw_GBps: 1\n    hbm_GiB: 1\n", "devices.X.fp16_tflops"),
        ("devices:\n  X:\n    base: H100\n    gemm_efficiency: 1.5\n", "fraction"),
        ("devices:\n  X:\n    base: H100\n    colour: red\n", "unknown device field"),
        ("devices:\n  X:\n    base: nope\n", "base device"),
        ("devices: [1, 2\n", "not valid YAML"),
        ("devices:\n  X:\n    base: H100\n    aliases: [A100]\n", "already names device"),
    ],
)
def test_bad_user_files(tmp_path, text, match):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_catalog(f)
    assert str(f) in str(info.value)


def test_missing_user_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the device file"):
        load_catalog(tmp_path / "nope.yaml")


def test_gemm_roofline_by_hand():
    h100 = get_device("H100")
    n = 8192
    flops = 2 * n**3
    # compute bound: flops / (989.4e12 * 0.75) + 2 us overhead
    expect = flops / (989.4e12 * h100.gemm_efficiency) * 1e9 + h100.kernel_overhead_ns
    got = kernel_time_ns("gemm", flops, 3 * n * n * 2, h100)
    assert abs(got - expect) <= 1


def test_elementwise_is_memory_bound_by_hand():
    a100 = get_device("A100-80GB")
    nbytes = 2 * 1024**3
    expect = nbytes / (2039e9 * a100.mem_efficiency) * 1e9 + a100.kernel_overhead_ns
    assert abs(kernel_time_ns(KernelClass.ELEMENTWISE, nbytes / 8, nbytes, a100) - expect) <= 1


def test_scale_between_devices():
    # no flops known: a compute-bound kernel scales with the achievable tensor rates (312 x 0.75 ->
    # 989.4 x 0.69: each device's GEMM efficiency), a memory-bound one with HBM bandwidth (2039 -> 3350);
    # overhead is kept fixed.
    oh = get_device("A100").kernel_overhead_ns
    a100, h100 = get_device("A100").gemm_efficiency, get_device("H100").gemm_efficiency
    assert (a100, h100) == (0.75, 0.69)
    rate = 312 * a100 / (989.4 * h100)
    got = scale_kernel_ns(1_000_000, "A100", "H100", "gemm")
    assert got == round((1_000_000 - oh) * rate + oh)
    got = scale_kernel_ns(1_000_000, "A100", "H100", "norm")
    assert got == round((1_000_000 - oh) * 2039 / 3350 + oh)
    assert scale_kernel_ns(123, "H100", "h100-sxm", "gemm") == 123
    # with flops: roofline ratio; a compute-bound GEMM gives the same ratio as the class one
    n = 8192
    r = scale_kernel_ns(1_000_000, "A100", "H100", "gemm", flops=2 * n**3, bytes=3 * n * n * 2)
    assert r == pytest.approx((1_000_000 - oh) * rate + oh, rel=1e-6)


def test_tp_scaling():
    assert tp_scale_ns(1_000_000, 2, 4) == 500_000
    assert tp_scale_ns(1_000_000, 4, 1) == 4_000_000
    # with a device the fixed 2 us overhead is not scaled
    assert tp_scale_ns(1_002_000, 2, 4, device="H100") == 502_000
    with pytest.raises(ConfigError):
        tp_scale_ns(1, 0, 2)


@pytest.mark.parametrize(
    "name, kc",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32", KernelClass.GEMM),
        ("flash_fwd_kernel", KernelClass.ATTENTION),
        ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", KernelClass.ELEMENTWISE),
        ("layer_norm_fwd", KernelClass.NORM),
        ("multi_tensor_apply_kernel<AdamFunctor>", KernelClass.OPTIMIZER),
    ],
)
def test_classify(name, kc):
    assert classify_kernel(name) is kc


@pytest.mark.parametrize(
    "alias, canonical, fp16_tflops, hbm_GiB, hbm_bw_GBps, pcie_GBps",
    [
        ("RTX-2080", "RTX-2080", 40.3, 8, 448, 15.75),
        ("GeForce RTX 2080 Ti", "RTX-2080-Ti", 53.8, 11, 616, 15.75),
        ("RTX-3090", "RTX-3090", 71.0, 24, 936, 31.5),
        ("3080Ti", "RTX-3080-Ti", 68.2, 12, 912, 31.5),
        ("RTX 4090", "RTX-4090", 165.2, 24, 1008, 31.5),
        ("Titan-RTX", "Titan-RTX", 130.0, 24, 672, 15.75),
        ("Tesla T4", "T4", 65.0, 16, 320, 15.75),
        ("V100-16GB", "V100-SXM2-16GB", 125.0, 16, 900, 15.75),
        ("V100-PCIe", "V100-PCIE-16GB", 112.0, 16, 900, 15.75),
        ("A100-PCIe-40G", "A100-PCIE-40GB", 312.0, 40, 1555, 31.5),
        ("GH-96", "GH200-96GB", 990.0, 96, 4000, 450),
    ],
)
def test_issue17_devices(alias, canonical, fp16_tflops, hbm_GiB, hbm_bw_GBps, pcie_GBps):
    """Consumer, inference and Grace Hopper parts of the heterogeneous reference runs: spec-sheet values
    (GeForce: the fp32-accumulate tensor rate), memory, bandwidth and the host link."""
    d = get_device(alias)
    assert d.name == canonical
    assert d.peak_flops("fp16") == pytest.approx(fp16_tflops * 1e12)
    assert d.hbm_GiB == hbm_GiB and d.hbm_bw_GBps == hbm_bw_GBps and d.pcie_GBps == pcie_GBps


def test_issue17_links_and_precisions():
    assert get_device("T4").nvlink_bidir_GBps == 0 and get_device("RTX-4090").nvlink_bidir_GBps == 0
    assert get_device("V100-16GB").nvlink_unidir_GBps == 150
    assert get_device("Titan-RTX").peak_flops("bf16") == pytest.approx(130e12)  # Turing: bf16 falls back to fp16
    assert get_device("RTX-4090").peak_flops("fp8") == pytest.approx(330.3e12)


def test_a100_pcie_power_limited_efficiencies():
    """The 300 W A100 PCIe runs the SXM4's (400 W) efficiencies scaled by the measured MAMF ratio 252.9 / 271.2:
    same peak, lower sustained tensor-core rate."""
    pcie, sxm = get_device("A100-PCIe"), get_device("A100-SXM4-80GB")
    assert pcie.peak_flops("fp16") == sxm.peak_flops("fp16")
    ratio = 252.9 / 271.2
    assert pcie.gemm_efficiency == pytest.approx(sxm.gemm_efficiency * ratio, abs=0.005)
    assert pcie.attention_efficiency == pytest.approx(sxm.attention_efficiency * ratio, abs=0.005)
    assert pcie.attention_bwd_efficiency == pytest.approx(sxm.attention_bwd_efficiency * ratio, abs=0.005)
