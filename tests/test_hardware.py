"""The generation dtype follows what the hardware computes natively (capability faked both
ways), and explicit settings win."""

from __future__ import annotations

import pytest

from birdrl.agents import hardware
from birdrl.agents.hardware import (
    Bf16Capability,
    HardwareError,
    choose_generation_dtype,
    detect_bf16,
)
from birdrl.training.config import ConfigError, apply_overrides, load_preset

NATIVE = Bf16Capability("cpu", True, "CPU AVX512 (AVX512-BF16 yes, AMX yes)")
EMULATED = Bf16Capability("cpu", False, "CPU AVX2 (AVX512-BF16 no, AMX no)")


@pytest.mark.parametrize(
    ("setting", "capability", "dtype"),
    [
        ("auto", NATIVE, "bfloat16"),
        ("auto", EMULATED, "float32"),
        (True, EMULATED, "bfloat16"),  # an explicit choice wins over the capability
        (False, NATIVE, "float32"),
    ],
)
def test_dtype_follows_the_capability_unless_told(
    setting: bool | str, capability: Bf16Capability, dtype: str
) -> None:
    choice = choose_generation_dtype(setting, capability)
    assert choice.dtype == dtype
    assert choice.capability == capability
    assert capability.detail in choice.reason
    assert choice.to_dict()["capability"]["native"] is capability.native


def test_a_bad_setting_is_refused() -> None:
    with pytest.raises(HardwareError, match="auto, true or false"):
        choose_generation_dtype("yes", NATIVE)
    with pytest.raises(ConfigError, match="bf16_generation must be auto, true or false"):
        apply_overrides(load_preset("smoke"), ['bf16_generation="fast"'])
    with pytest.raises(ConfigError, match="bf16_training must be auto, true or false"):
        apply_overrides(load_preset("smoke"), ['bf16_training="fast"'])


@pytest.mark.parametrize(
    ("dtype", "setting", "capability", "bf16", "described"),
    [
        ("float32", "auto", NATIVE, True, "float32 + bf16 autocast"),
        ("float32", "auto", EMULATED, False, "float32"),  # emulated bf16: 30-70x slower
        ("float32", True, EMULATED, True, "float32 + bf16 autocast"),
        ("float32", False, NATIVE, False, "float32"),
        ("bfloat16", False, NATIVE, True, "bfloat16"),  # bf16 weights train in bf16
    ],
)
def test_training_autocasts_only_where_bf16_is_native_unless_told(
    dtype: str, setting: bool | str, capability: Bf16Capability, bf16: bool, described: str
) -> None:
    pytest.importorskip("torch")
    from birdrl.training.models import training_precision

    precision = training_precision(dtype, setting, capability)
    assert precision.bf16 is bf16
    assert precision.describe() == described
    assert precision.reason.startswith(f"{described} (bf16_training = ")
    assert capability.detail in precision.reason


@pytest.mark.parametrize(
    ("features", "native"),
    [
        ({"capability": "AVX2", "avx512_bf16": False, "amx": False}, False),
        ({"capability": "AVX512", "avx512_bf16": True, "amx": False}, True),
        ({"capability": "AVX512", "avx512_bf16": False, "amx": True}, True),
    ],
)
def test_cpu_capability_is_read_from_torchs_queries(
    monkeypatch: pytest.MonkeyPatch, features: dict[str, bool | str], native: bool
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setattr(hardware, "_cpu_features", lambda: features)
    found = detect_bf16("cpu")
    assert found.device == "cpu" and found.native is native
    assert str(features["capability"]) in found.detail


@pytest.mark.parametrize(
    ("cap", "native"),
    [("AVX2", False), ("avx512_core", False), ("AVX512_CORE_AMX", True), ("", True)],
)
def test_a_onednn_cap_below_bf16_means_no_native_bf16(
    monkeypatch: pytest.MonkeyPatch, cap: str, native: bool
) -> None:
    """``ONEDNN_MAX_CPU_ISA=AVX2`` keeps oneDNN off AVX512-BF16 and AMX on a CPU that has
    them, so bf16 is not native there."""
    pytest.importorskip("torch")
    features = {"capability": "AVX512", "avx512_bf16": True, "amx": True}
    monkeypatch.setattr(hardware, "_cpu_features", lambda: features)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    found = detect_bf16("cpu")
    assert found.native is native
    assert ("ONEDNN_MAX_CPU_ISA" in found.detail) is not native


def test_this_machines_capability_is_what_torch_reports() -> None:
    torch = pytest.importorskip("torch")
    found = detect_bf16("cpu")
    expected = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert found.native is (bool(expected) and hardware._onednn_cap() is None)
    assert torch.backends.cpu.get_cpu_capability() in found.detail


def test_use_vllm_names_its_replacement() -> None:
    with pytest.raises(ConfigError, match="replaced by generation_engine"):
        apply_overrides(load_preset("smoke"), ["use_vllm=true"])
    with pytest.raises(ConfigError, match="generation_engine must be one of auto, hf, vllm"):
        apply_overrides(load_preset("smoke"), ["generation_engine=fast"])
    with pytest.raises(ConfigError, match="vllm_mode must be colocate or server"):
        apply_overrides(load_preset("smoke"), ["vllm_mode=remote"])
