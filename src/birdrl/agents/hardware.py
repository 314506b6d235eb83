"""Where bfloat16 is used (generation; mixed-precision training): only where the hardware
computes it natively.

Decoding a small model reads every weight once per token, so bf16 halves the bytes moved
and is faster where bf16 has native kernels (a CUDA GPU of compute capability 8 or more;
an x86 CPU with AVX512-BF16 or AMX). Without them, bf16 matrix products are emulated and
run 30-70x slower than fp32 (measured: a 1024x576 by 576x1536 product took 1.5 s in bf16
against 53 ms in fp32 on an AVX2-only AMD EPYC), so ``auto`` picks fp32 there.

The CPU check uses torch's own capability queries (``torch.cpu._is_avx512_bf16_supported``,
``torch.cpu._is_amx_tile_supported``), not a timing probe: they read the same CPU features
that oneDNN dispatches its bf16 kernels on, answer in microseconds, and give the same
answer on a loaded machine, where a timed probe would not. A cap on oneDNN's instruction
set below AVX512-BF16 (``ONEDNN_MAX_CPU_ISA``, e.g. ``AVX2``) keeps oneDNN off those
features, so it counts as no native bf16 too. torch is imported inside the functions, so
this module loads on the core install.

Training asks the same question (``bf16_training``): where bf16 is native, bf16 autocast over
float32 weights halves a forward, backward and optimizer step of SmolLM2-135M on 4 x 1,000
tokens (8.3-10 s against 16-21 s in float32 on a 2-core Emerald Rapids Xeon; a tiny-preset
stage-2 step went from 17.4 to 12.6 s); elsewhere it would be many times slower.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError

__all__ = [
    "Bf16Capability",
    "DtypeChoice",
    "HardwareError",
    "choose_generation_dtype",
    "describe_machine",
    "detect_bf16",
]


class HardwareError(BirdrlError, ValueError):
    """A ``bf16_generation`` or ``bf16_training`` setting other than ``auto``, true or false."""


@dataclass(frozen=True)
class Bf16Capability:
    """Whether the device generation runs on computes bf16 natively, and why we think so."""

    device: str
    """``cuda`` or ``cpu``."""
    native: bool
    detail: str
    """What was found, e.g. ``CPU AVX2 (AVX512-BF16 no, AMX no)``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype a run uses for one job (generation or training's matrix products), the
    setting it came from, and the capability seen."""

    dtype: str
    """``bfloat16`` or ``float32``."""
    setting: str
    """``auto``, ``true`` or ``false`` (as written in the config)."""
    capability: Bf16Capability
    name: str = "bf16_generation"
    """The setting's name in the config."""

    @property
    def bf16(self) -> bool:
        return self.dtype == "bfloat16"

    @property
    def why(self) -> str:
        """The setting and the capability seen, e.g. ``bf16_generation = auto: native bf16;
        CPU AVX512 (AVX512-BF16 yes, AMX yes)``."""
        if self.setting == "auto":
            native = "native bf16" if self.capability.native else "no native bf16"
            return f"{self.name} = auto: {native}; {self.capability.detail}"
        return f"{self.name} = {self.setting}; {self.capability.detail}"

    @property
    def reason(self) -> str:
        """One line for the report: the dtype and why."""
        return f"{self.dtype} ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "setting": self.setting, "capability": asdict(self.capability)}


def _cpu_features() -> dict[str, bool | str]:
    """torch's view of this CPU: its kernel level and the bf16 features (False when this
    torch build cannot ask, e.g. on ARM)."""
    import torch

    def ask(name: str) -> bool:
        query: Callable[[], bool] | None = getattr(torch.cpu, name, None)
        return bool(query()) if query is not None else False

    return {
        "capability": str(torch.backends.cpu.get_cpu_capability()),
        "avx512_bf16": ask("_is_avx512_bf16_supported"),
        "amx": ask("_is_amx_tile_supported"),
    }


BELOW_BF16_ISAS = frozenset(
    {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI"}
)
"""``ONEDNN_MAX_CPU_ISA`` values that stop oneDNN short of its native bf16 kernels."""


def _onednn_cap() -> str | None:
    """The oneDNN instruction-set cap from ``ONEDNN_MAX_CPU_ISA`` (or its older name
    ``DNNL_MAX_CPU_ISA``) when it rules out native bf16, else None."""
    cap = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "").upper()
    return cap if cap in BELOW_BF16_ISAS else None


def _cuda_bf16() -> tuple[bool, str]:
    import torch

    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    native = bool(torch.cuda.is_bf16_supported(including_emulation=False))
    return native, f"CUDA {name} (sm_{major}{minor}): bf16 {'native' if native else 'emulated'}"


def detect_bf16(device: str = "auto") -> Bf16Capability:
    """What `device` (``auto``: cuda when torch sees one, else cpu) does with bf16."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        native, detail = _cuda_bf16()
        return Bf16Capability("cuda", native, detail)
    features = _cpu_features()
    cap = _onednn_cap()
    native = bool(features["avx512_bf16"] or features["amx"]) and cap is None
    detail = (
        f"CPU {features['capability']} (AVX512-BF16 {'yes' if features['avx512_bf16'] else 'no'}, "
        f"AMX {'yes' if features['amx'] else 'no'})"
    )
    if cap is not None:
        detail += f"; ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN from them"
    return Bf16Capability("cpu", native, detail)


def choose_generation_dtype(
    setting: bool | str,
    capability: Bf16Capability | None = None,
    *,
    name: str = "bf16_generation",
) -> DtypeChoice:
    """The dtype for generation (or, with `name` ``bf16_training``, for training's autocast):
    `setting` True or False wins; ``auto`` takes bf16 only where `capability` (default:
    `detect_bf16()`) says bf16 is native."""
    if setting != "auto" and not isinstance(setting, bool):
        raise HardwareError(f"{name} must be auto, true or false, not {setting!r}")
    capability = capability or detect_bf16()
    if setting == "auto":
        bf16 = capability.native
        label = "auto"
    else:
        bf16 = bool(setting)
        label = "true" if bf16 else "false"
    return DtypeChoice("bfloat16" if bf16 else "float32", label, capability, name)


def describe_machine() -> dict[str, Any]:
    """The CPU's name, its core count and its bf16 capability: what every timing written
    down must name (benchmarks print it)."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")  # Linux; elsewhere platform's name is all there is
    if cpuinfo.is_file():
        fields: dict[str, str] = {}
        for line in cpuinfo.read_text().splitlines():  # the first processor's fields
            key, sep, value = line.partition(":")
            if sep and key.strip() not in fields:
                fields[key.strip()] = value.strip()
        cpu = fields.get("model name", cpu)
        if "cpu family" in fields and "model" in fields:  # a virtualised "AMD EPYC" says no more
            cpu += f" (family {fields['cpu family']}, model {fields['model']})"
    return {"cpu": cpu, "cores": os.cpu_count(), "bf16": detect_bf16().to_dict()}
