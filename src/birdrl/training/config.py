"""Typed curriculum configuration and its presets.

A preset is a TOML file (``birdrl/training/presets/<name>.toml`` or any path) read into
`CurriculumConfig`. Unknown keys and wrongly typed values are errors that name the key
and the file, so a typo never silently falls back to a default. ``--set key=value``
overrides use the same dotted names (``stage3.max_steps=2``).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from birdrl.errors import BirdrlError
from birdrl.evaluation.semantics import Semantics, SemanticsError
from birdrl.tasks.benchmark import split_source

__all__ = [
    "DEFAULT_COLLECTIVE_TIMEOUT_MIN",
    "GENERATION_ENGINES",
    "ConfigError",
    "CurriculumConfig",
    "EvalSettings",
    "GRPOStageConfig",
    "HardwareSettings",
    "HeldOutSplit",
    "IMPORTANCE_SAMPLING_MODES",
    "LoraSettings",
    "PromptSettings",
    "SHARDINGS",
    "SFTStageConfig",
    "apply_overrides",
    "config_to_dict",
    "list_presets",
    "load_preset",
]


DEFAULT_COLLECTIVE_TIMEOUT_MIN = 360.0
"""How long ranks wait for each other by default: the main process's evaluation of a large
model on the full held-out split can take hours."""


class ConfigError(BirdrlError, ValueError):
    """A preset or override that does not fit the configuration schema."""


GENERATION_ENGINES = ("auto", "hf", "vllm")
"""The values of ``generation_engine``."""
IMPORTANCE_SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""The values of ``vllm_importance_sampling`` (TRL's ``vllm_importance_sampling_mode``)."""
RENAMED = {
    "use_vllm": 'use_vllm was replaced by generation_engine: generation_engine = "vllm" '
    '(or "hf", or "auto": vLLM when installed)',
}
"""Settings that no longer exist, and what replaced them (said instead of "unknown")."""


@dataclass(frozen=True)
class PromptSettings:
    """How much of the database the prompts show (the schema dominates prompt length)."""

    schema_budget_chars: int = 8000
    """Characters of CREATE statements and sample rows in the user prompt."""
    sample_rows: int = 3
    """Sample rows shown per table."""


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters (peft); merged into the weights at the end of each stage so the next
    stage starts from a plain model directory."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | list[str] = "all-linear"


@dataclass(frozen=True)
class SFTStageConfig:
    """Stages 1 and 2: supervised fine-tuning on verified teacher data (TRL ``SFTTrainer``,
    loss on assistant tokens only)."""

    enabled: bool = True
    teacher: str = "offline"
    """Stage 1: ``offline`` or an agent spec; stage 2: an agent spec (``explorer``, ``openai:M``)."""
    max_samples: int | None = None
    """Use at most this many training tasks (None: all), taken across databases and
    categories with the run's seed (`birdrl.tasks.subset.stratified_subset`)."""
    epochs: float = 2.0
    max_steps: int = -1
    """Optimizer steps (-1: derived from ``epochs``)."""
    learning_rate: float = 1e-5
    batch_size: int = 1
    grad_accum: int = 8
    max_length: int = 8192
    """Longer samples are truncated (and counted in the stage notes)."""
    tasks: str | None = None
    """Train this stage on these tasks (a task source, like the run's ``tasks``); None:
    the run's ``tasks``."""
    samples_per_source: list[int] | None = None
    """With ``tasks`` joining sources by ``+``: at most this many tasks of each source, in
    the order ``tasks`` names them, each taken like ``max_samples`` (which must then be
    unset). Sets the mix that one limit over the joined set leaves to the sources' sizes."""

    def __post_init__(self) -> None:
        if self.samples_per_source is None:
            return
        if self.max_samples is not None:
            raise ConfigError("set max_samples or samples_per_source, not both")
        if any(n < 0 for n in self.samples_per_source):
            raise ConfigError(f"samples_per_source must be >= 0, not {self.samples_per_source}")


@dataclass(frozen=True)
class GRPOStageConfig:
    """Stages 3 (single-turn) and 4 (trajectory-level multi-turn): GRPO (TRL ``GRPOTrainer``)."""

    enabled: bool = True
    max_samples: int | None = None
    """Use at most this many training tasks (None: all), stratified like stage 1's."""
    max_steps: int = 200
    learning_rate: float = 1e-6
    batch_size: int = 8
    """Completions per device per optimizer step (a multiple of ``num_generations``)."""
    grad_accum: int = 1
    num_generations: int = 8
    """Group size G: completions per prompt."""
    max_completion_length: int = 1024
    """Token budget of a completion; in stage 4 the whole episode (tool results included)."""
    temperature: float = 1.0
    beta: float = 0.0
    """KL weight towards the reference policy (stage 4: stage 3's model)."""
    reward: str = "execution"
    """``execution`` (default, test pass rate) or an ablation: ``local``, ``heuristic``, ``judge``."""
    judge: str | None = None
    """Agent spec of the LLM judge (``openai:MODEL``) for ``reward = "judge"``."""
    text2sql_ratio: float = 0.0
    """Debugging prompts per text-to-SQL prompt (3.0 = 3:1; stage 3 default); 0 disables
    mixing. Stage 3 only: stage 4 trains on debugging episodes."""
    max_tool_calls: int = 5
    """Stage 4: tool calls per episode."""
    tasks: str | None = None
    """Train this stage on these tasks (a task source, like the run's ``tasks``); None:
    the run's ``tasks``."""
    task_order: str = "stratified"
    """Which `max_samples` training tasks: ``stratified`` (across databases and categories)
    or ``easy-first`` (tasks whose buggy SQL already earns partial credit first, so
    rewards vary within groups; `birdrl.data.difficulty`)."""
    no_signal_steps: int = 3
    """Warn when this many consecutive steps had no learning signal (every group's rewards
    equal, so every advantage is 0)."""
    log_groups: int = 4
    """GRPO groups (a prompt, its G completions, their rewards and advantages) written per
    step to ``stageN/groups.jsonl`` for `birdrl view`; 0 writes none."""
    env_server: str | None = None
    """Stage 4: run the episodes on ``birdrl env serve`` at this URL (``http://host:port``;
    its bearer token from ``BIRDRL_ENV_TOKEN``) instead of an in-process pool. The server
    must serve the training tasks; its own limits (``--max-tool-calls``) apply."""

    def __post_init__(self) -> None:
        if self.env_server is not None and not self.env_server.startswith(
            ("http://", "https://", "ws://", "wss://")
        ):
            raise ConfigError(
                f"env_server must be a URL such as http://127.0.0.1:8000, got {self.env_server!r}"
            )
        if self.log_groups < 0:
            raise ConfigError(f"log_groups must be >= 0, got {self.log_groups}")
        if self.task_order not in ("stratified", "easy-first"):
            raise ConfigError(
                f"task_order must be 'stratified' or 'easy-first', got {self.task_order!r}"
            )
        if self.no_signal_steps < 1:
            raise ConfigError(f"no_signal_steps must be >= 1, got {self.no_signal_steps}")


MAIN_SPLIT = "held-out"
"""The label of ``eval_tasks`` among the evaluated splits."""
_SPLIT_LABEL = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class HeldOutSplit:
    """A held-out split evaluated after each stage besides ``eval_tasks`` and reported
    apart (a ``[[evaluation.splits]]`` table)."""

    label: str = ""
    """Its name in the report, the viewer and the trajectory file
    (``stageN/eval_trajectories_<label>.jsonl``): lower-case letters, digits, ``-``, ``_``."""
    tasks: str = ""
    """Its task source (``bundled:test-easy``, a file, ``hf:NAME``)."""
    limit: int | None = None
    """Evaluate N of its tasks, taken like `EvalSettings.limit`'s (None: as ``limit``)."""
    db_root: str | None = None
    """The databases of its task files (None: ``eval_db_root``, else ``db_root``);
    ``bundled:`` sets bring their own (`birdrl.training.sources`)."""


@dataclass(frozen=True)
class EvalSettings:
    """The held-out evaluation run after each stage."""

    limit: int | None = None
    """Evaluate on N held-out tasks (None: all), taken across databases and categories
    with the run's seed (`birdrl.tasks.subset.stratified_subset`)."""
    easy_limit: int | None = None
    """Evaluate on N tasks of `easy_eval_tasks`, taken like `limit`'s (None: as `limit`)."""
    max_new_tokens: int = 1024
    max_tool_calls: int = 5
    batch_size: int = 8
    """Episodes in flight (conversations per generate call)."""
    base_model: bool = True
    """Also evaluate the starting model (stage 0) for the report's baseline."""
    splits: list[HeldOutSplit] = field(default_factory=list)
    """More held-out splits, each evaluated after every stage in the same batch as
    ``eval_tasks`` and reported apart with its own intervals."""
    skip_stages: list[int] = field(default_factory=list)
    """Training stages (1-4) not evaluated after they train: the report's row says so and
    the next stage's change is measured from the last evaluated one. For a stage that
    teaches nothing measurable at a preset's size (stage 1 of ``tiny``)."""

    def __post_init__(self) -> None:
        wrong = [n for n in self.skip_stages if n not in (1, 2, 3, 4)]
        if wrong:
            raise ConfigError(f"evaluation.skip_stages holds stages 1-4, not {wrong}")

    def evaluates(self, stage: int) -> bool:
        """Whether `stage` is evaluated after it trains."""
        return stage not in self.skip_stages


SHARDINGS = ("ddp", "zero2", "zero3", "fsdp")
"""How training state is spread over GPUs (`HardwareSettings.sharding`)."""


@dataclass(frozen=True)
class HardwareSettings:
    """The machine a preset is made for: `birdrl.training.memory` plans each stage's memory
    per GPU on it, and a shipped preset must fit the hardware it names. A run is checked
    against the GPUs it really has before it loads anything."""

    gpus: int = 0
    """GPUs (0: a CPU run, nothing to plan)."""
    gpu_memory_gib: float = 80.0
    """Memory of one GPU in GiB."""
    sharding: str = "ddp"
    """``ddp`` (every GPU holds the whole training state; one GPU: a single process),
    ``zero2`` (optimizer state and gradients sharded), ``zero3`` or ``fsdp`` (weights
    too); the accelerate config the run is launched with (docs/scaling.md)."""

    def __post_init__(self) -> None:
        if self.sharding not in SHARDINGS:
            raise ConfigError(
                f"hardware.sharding must be one of {', '.join(SHARDINGS)}, not {self.sharding!r}"
            )
        if self.gpus < 0:
            raise ConfigError(f"hardware.gpus must be >= 0, got {self.gpus}")
        if self.gpu_memory_gib <= 0:
            raise ConfigError(f"hardware.gpu_memory_gib must be > 0, got {self.gpu_memory_gib}")


@dataclass(frozen=True)
class CurriculumConfig:
    """The whole four-stage run."""

    name: str = "custom"
    description: str = ""
    model: str = "embedded"
    """Starting model: ``embedded``, a local directory, or a hub id (needs network)."""
    tasks: str = "bundled:train"
    eval_tasks: str = "bundled:test"
    easy_eval_tasks: str | None = None
    """A held-out split labelled ``easy`` (``bundled:test-easy``: single-edit bugs
    synthesized from the test split's solutions), for models too small to move the success
    rate on ``eval_tasks``; the same as an ``[[evaluation.splits]]`` entry with label
    ``easy`` and ``evaluation.easy_limit`` as its limit (kept for existing presets)."""
    text2sql_tasks: str | None = "bundled:text2sql-train"
    """Text-to-SQL source for multi-task mixing (used when a stage's ``text2sql_ratio`` > 0)."""
    db_root: str | None = None
    """The databases of the training task files (``tasks``, each stage's ``tasks``), and
    of any other source's task files whose own root is unset. ``bundled:`` sets always use
    the bundled databases (`birdrl.training.sources`)."""
    eval_db_root: str | None = None
    """The databases of the held-out task files (``eval_tasks``, ``easy_eval_tasks``,
    ``[[evaluation.splits]]`` without their own ``db_root``); None: ``db_root``."""
    text2sql_db_root: str | None = None
    """The databases of a ``text2sql_tasks`` file (BIRD's ``train_databases``); None:
    ``db_root``."""
    eval_semantics: str = "official"
    """How held-out evaluations are scored: ``official`` (each engine's official evaluator,
    comparable with published numbers) or ``strict`` (docs/evaluation.md, "Scoring
    semantics")."""
    reward_semantics: str = "strict"
    """How GRPO rewards and teacher data are scored: ``strict`` by default, because under
    ``official`` a PostgreSQL or MySQL task without tests rewards any SQL that executes."""
    refuse_overlap: bool = False
    """Refuse to run when the evaluated held-out tasks share text with the training tasks
    (`birdrl.tasks.overlap`: question, issue or solution SQL); without it the run warns and
    the report says so."""
    seed: int = 0
    dtype: str = "auto"
    """``auto`` (bf16 on GPU, fp32 on CPU), ``float32``, ``bfloat16``."""
    gradient_checkpointing: bool = False
    generation_engine: str = "auto"
    """What generates held-out episodes and GRPO rollouts (`birdrl.training.generation`):
    ``vllm`` (one vLLM engine for the whole run, CPU or GPU build), ``hf`` (transformers
    ``generate``) or ``auto`` (vLLM when it is installed and the run is one process, else
    ``hf``)."""
    bf16_generation: bool | str = "auto"
    """Generate in bfloat16: ``auto`` (only where the hardware computes bf16 natively: a
    CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX; fp32 elsewhere, where bf16 is 30-70x
    slower), ``true`` or ``false``."""
    bf16_training: bool | str = False
    """Train under bfloat16 autocast (TRL's ``bf16``; the weights and optimizer state stay
    in ``dtype``): ``false`` (the default), ``true``, or ``auto`` (only where the hardware
    computes bf16 natively, as for ``bf16_generation``). Weights loaded in bf16 train in
    bf16 whatever this says. Off by default: on the tiny preset it cut the run from 24.5 to
    20.5 minutes on a native-bf16 CPU, but stage 2 then taught the tool-call format worse
    (docs/training.md)."""
    vllm_mode: str = "colocate"
    """``colocate`` (vLLM inside the training process: in a single process the run's one
    engine, in a multi-process run TRL's engine per rank) or ``server`` (a separate ``trl
    vllm-serve`` process on other GPUs, at ``vllm_server_url``)."""
    vllm_server_url: str | None = None
    """``server`` mode: the base URL of ``trl vllm-serve`` (default http://localhost:8000)."""
    vllm_kv_cache_gib: int = 2
    """The run's vLLM engine on a CPU: GiB of memory for its KV cache."""
    vllm_gpu_memory_utilization: float = 0.3
    """vLLM colocated on a GPU: the share of GPU memory it takes (training needs the rest).
    vLLM budgets this share of the GPU's *total* memory for its weights and KV cache, so it
    must exceed the model's bf16 weights (14.7B: about 29.5 GB)."""
    vllm_tensor_parallel_size: int = 1
    """vLLM on GPUs: shard the engine's weights over this many GPUs (TRL's colocated engine
    in a multi-process run, ``birdrl eval --agent vllm:...``)."""
    vllm_max_model_len: int | None = None
    """The engine's longest prompt + completion in tokens; None: derived from the preset's
    lengths (`birdrl.training.generation.derive_max_model_len`), capped at the model's
    context."""
    vllm_enforce_eager: bool | str = "auto"
    """``auto``: eager on a CPU (compiling took 230 s for a 5% faster decode), CUDA graphs
    on a GPU; ``true`` or ``false``."""
    vllm_sleep_mode: bool | str = "auto"
    """Put the engine to sleep (weights offloaded, KV cache freed) while a stage trains, so
    the trainer gets the memory back: ``auto`` (on a GPU; vLLM's CPU build has no sleep
    mode), ``true`` or ``false``."""
    vllm_importance_sampling: str = "token_truncate"
    """How GRPO corrects for rollouts sampled by another engine or precision than the
    trainer's (TRL's ``vllm_importance_sampling_mode``): ``token_truncate`` (per-token
    ratios, capped; the default, since a whole episode's product of ratios vanishes at a few
    thousand tokens), ``token_mask``, ``sequence_truncate``, ``sequence_mask``."""
    report_to: str = "tensorboard"
    """TRL/transformers ``report_to`` (``none`` to disable)."""
    prefix_sharing: bool = True
    """Compute shared prompt tokens once (`birdrl.training.prefix_sharing`): in GRPO a
    group's prompt once per log-probability pass instead of once per completion, in SFT the
    start every sample of a micro-batch shares (system prompt, tools); the same gradient, to
    rounding. TRL's own path where it cannot apply (several processes, gradient
    checkpointing, packing)."""
    verify_clean_leases: bool = False
    """Stage 4: fingerprint every replica when it is leased and stop if it differs from its
    template (a contamination check for new deployments; one database read per episode)."""
    save_steps: int = 50
    """Checkpoint every N steps inside a stage, so ``--resume`` continues mid-stage."""
    collective_timeout_minutes: float = DEFAULT_COLLECTIVE_TIMEOUT_MIN
    """Several processes: how long a barrier or collective of the run waits for the other
    ranks before it fails (`birdrl.training.distributed`). A rank that dies or hangs then
    stops every other rank with an error within this time, instead of leaving them waiting.
    It must exceed the longest wait a healthy run has: the main process's evaluation after a
    stage (hours for a large model on the full held-out split)."""
    prompt: PromptSettings = field(default_factory=PromptSettings)
    lora: LoraSettings = field(default_factory=LoraSettings)
    stage1: SFTStageConfig = field(default_factory=SFTStageConfig)
    stage2: SFTStageConfig = field(default_factory=lambda: SFTStageConfig(teacher="explorer"))
    stage3: GRPOStageConfig = field(default_factory=lambda: GRPOStageConfig(text2sql_ratio=3.0))
    stage4: GRPOStageConfig = field(default_factory=lambda: GRPOStageConfig(beta=0.04))
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)

    def __post_init__(self) -> None:
        if self.generation_engine not in GENERATION_ENGINES:
            raise ConfigError(
                f"generation_engine must be one of {', '.join(GENERATION_ENGINES)}, "
                f"not {self.generation_engine!r}"
            )
        for name in ("bf16_generation", "bf16_training"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "auto":
                raise ConfigError(f"{name} must be auto, true or false, not {value!r}")
        for name in ("eval_semantics", "reward_semantics"):
            try:
                Semantics.parse(getattr(self, name))
            except SemanticsError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        if self.vllm_mode not in ("colocate", "server"):
            raise ConfigError(f"vllm_mode must be colocate or server, not {self.vllm_mode!r}")
        for name in ("vllm_enforce_eager", "vllm_sleep_mode"):
            value = getattr(self, name)
            if isinstance(value, str) and value != "auto":
                raise ConfigError(f"{name} must be auto, true or false, not {value!r}")
        if self.vllm_importance_sampling not in IMPORTANCE_SAMPLING_MODES:
            raise ConfigError(
                f"vllm_importance_sampling must be one of {', '.join(IMPORTANCE_SAMPLING_MODES)}, "
                f"not {self.vllm_importance_sampling!r}"
            )
        if not self.collective_timeout_minutes > 0:
            raise ConfigError(
                f"collective_timeout_minutes must be > 0, got {self.collective_timeout_minutes}"
            )
        if self.vllm_tensor_parallel_size < 1:
            raise ConfigError(
                f"vllm_tensor_parallel_size must be >= 1, got {self.vllm_tensor_parallel_size}"
            )
        if self.vllm_max_model_len is not None and self.vllm_max_model_len < 1:
            raise ConfigError(f"vllm_max_model_len must be >= 1, got {self.vllm_max_model_len}")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ConfigError(
                "vllm_gpu_memory_utilization must be in (0, 1], got "
                f"{self.vllm_gpu_memory_utilization}"
            )
        for name in ("db_root", "eval_db_root", "text2sql_db_root"):
            root = getattr(self, name)
            if root is not None and not root.strip():
                raise ConfigError(f"{name} must name a directory or be left out")
        self.held_out_splits()  # raises on a bad split
        for n in (1, 2, 3, 4):
            tasks = getattr(self, f"stage{n}").tasks
            if tasks is not None and not tasks.strip():
                raise ConfigError(f"stage{n}.tasks must name a task source or be left out")
        for n in (1, 2):  # a count per joined source, refused before any stage runs
            quotas, source = getattr(self, f"stage{n}").samples_per_source, self.stage_tasks(n)
            if quotas is not None and len(quotas) != (parts := len(split_source(source))):
                raise ConfigError(
                    f"stage{n}.samples_per_source has {len(quotas)} number(s) for the "
                    f"{parts} source(s) of {source!r}"
                )

    def held_out_splits(self) -> list[HeldOutSplit]:
        """The held-out splits evaluated besides ``eval_tasks``, in report order:
        ``easy_eval_tasks`` first (as the split ``easy``), then ``evaluation.splits``."""
        splits = list(self.evaluation.splits)
        if self.easy_eval_tasks:
            easy = HeldOutSplit("easy", self.easy_eval_tasks, self.evaluation.easy_limit)
            splits.insert(0, easy)
        seen: set[str] = set()
        legacy = 1 if self.easy_eval_tasks else 0
        for i, split in enumerate(splits):
            where = "easy_eval_tasks" if i < legacy else f"evaluation.splits[{i - legacy}]"
            if not _SPLIT_LABEL.match(split.label):
                raise ConfigError(
                    f"{where}.label must be lower-case letters, digits, '-' or '_' "
                    f"(it names a file), got {split.label!r}"
                )
            if split.label == MAIN_SPLIT:
                raise ConfigError(f"{where}.label: {MAIN_SPLIT!r} is eval_tasks' own label")
            if split.label in seen:
                raise ConfigError(
                    f"{where}.label {split.label!r} is used twice"
                    + (" (easy_eval_tasks is the split 'easy')" if split.label == "easy" else "")
                )
            seen.add(split.label)
            if not split.tasks.strip():
                raise ConfigError(f"{where}.tasks: give the split's task source")
            if split.limit is not None and split.limit < 1:
                raise ConfigError(f"{where}.limit must be >= 1 or left out, got {split.limit}")
            if split.db_root is not None and not split.db_root.strip():
                raise ConfigError(f"{where}.db_root must name a directory or be left out")
        return splits

    def stage_tasks(self, stage: int) -> str:
        """The task source stage `stage` trains on: its own ``tasks``, else the run's."""
        own: str | None = getattr(self, f"stage{stage}").tasks
        return own or self.tasks


# -- reading --------------------------------------------------------------------------------


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against the annotation `tp` (scalars, optionals, lists, dataclasses)."""
    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {type(value).__name__}")
        return _merge(tp(), value, where)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in typing.get_args(tp):
            if option is type(None):
                if value is None:
                    return None
                continue
            try:
                return _coerce(value, option, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool):
        if type(value) is not tp:
            raise ConfigError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {tp}")  # pragma: no cover - schema bug


def list_presets() -> list[str]:
    """Names of the presets shipped with birdrl."""
    folder = resources.files("birdrl.training").joinpath("presets")
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def load_preset(name_or_path: str | Path) -> CurriculumConfig:
    """A shipped preset by name (``tiny``) or a TOML file by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise ConfigError(f"preset file {path} does not exist")
        text, where = path.read_text(encoding="utf-8"), str(path)
    else:
        entry = resources.files("birdrl.training").joinpath(f"presets/{name_or_path}.toml")
        if not entry.is_file():
            raise ConfigError(
                f"unknown preset {str(name_or_path)!r}; shipped presets: "
                f"{', '.join(list_presets())} (or give a path to a .toml file)"
            )
        text, where = entry.read_text(encoding="utf-8"), f"preset {name_or_path}"
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from exc
    try:
        config: CurriculumConfig = _merge(CurriculumConfig(), data, "")
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return config


def apply_overrides(config: CurriculumConfig, overrides: list[str]) -> CurriculumConfig:
    """Apply ``key=value`` overrides; values are TOML literals (``2``, ``"x"``, ``true``),
    and a bare word is taken as a string."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r}: expected key=value (e.g. stage3.max_steps=2)")
        try:
            value = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw.strip()
        parts = key.strip().split(".")
        nested: dict[str, Any] = {parts[-1]: value}
        for part in reversed(parts[:-1]):
            nested = {part: nested}
        config = _merge(config, nested, "")
    return config


def _merge(obj: Any, data: dict[str, Any], where: str) -> Any:
    known = {f.name for f in fields(obj)}
    hints = typing.get_type_hints(type(obj))
    values = {}
    for name, value in data.items():
        key = f"{where}.{name}" if where else name
        if name not in known and name in RENAMED and not where:
            raise ConfigError(f"setting {key!r}: {RENAMED[name]}")
        if name not in known:
            raise ConfigError(f"unknown setting {key!r} (known here: {', '.join(sorted(known))})")
        # a partial table keeps the field's own defaults (stage4.beta stays 0.04)
        current = getattr(obj, name)
        if is_dataclass(current) and isinstance(value, dict):
            values[name] = _merge(current, value, key)
        else:
            values[name] = _coerce(value, hints[name], key)
    return replace(obj, **values)


def config_to_dict(config: Any) -> dict[str, Any]:
    """The configuration as plain data (for the run's ``config.json`` and the report)."""
    return dataclasses.asdict(config)
