"""The settings that decide what an evaluated model's episodes look like, kept next to the
model: ``birdrl_eval.json`` in its directory.

A curriculum evaluates each stage's model with its preset's prompt (schema budget, sample
rows), the tool descriptions it trained with, its episode limits and decoding; it writes
those settings beside every model it saves (`AgentEvalSettings.write`) and evaluates from
the same object, and ``birdrl eval --agent hf:DIR`` / ``vllm:DIR`` reads them back
(`choose_eval_settings`), so a stage's number can be reproduced from the command line. A
model without the file is evaluated with `AgentEvalSettings()`: ``birdrl eval``'s own
defaults.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from birdrl.agents.base import GenerationConfig
from birdrl.agents.models import EMBEDDED_ALIASES, is_hub_id, resolve_model
from birdrl.agents.registry import ModelSettings, agent_kind, token_counter_for
from birdrl.agents.rollout import RolloutConfig
from birdrl.env.sqlact import EnvConfig
from birdrl.env.tools import TOOLS
from birdrl.env.types import Message
from birdrl.errors import BirdrlError
from birdrl.evaluation.semantics import EVAL_SEMANTICS, Semantics
from birdrl.hub import hub_cache_dir

__all__ = [
    "EVAL_SETTINGS_FILE",
    "EVAL_SETTINGS_VERSION",
    "AgentEvalSettings",
    "EvalSettingsError",
    "ChosenSettings",
    "choose_eval_settings",
    "read_eval_settings",
    "recorded_settings",
]

EVAL_SETTINGS_FILE = "birdrl_eval.json"
"""The file name, in a model directory."""
EVAL_SETTINGS_VERSION = 1
"""The version this code writes and the newest it reads."""
TOKEN_COUNTS = ("model", "approx")
"""How the context budget is counted (`AgentEvalSettings.token_count`)."""
DTYPES = ("auto", "float32", "bfloat16")


class EvalSettingsError(BirdrlError, ValueError):
    """A ``birdrl_eval.json`` that cannot be read, or a setting out of range."""


@dataclass(frozen=True)
class AgentEvalSettings:
    """Everything besides the model and the tasks that changes an evaluation's episodes.
    The defaults are ``birdrl eval``'s when a model directory has no file."""

    mode: str = "agent"
    """``agent``: multi-turn with tools; ``single``: one answer, no tools."""
    max_tool_calls: int = 5
    """Tool calls (and unparseable turns) per episode."""
    schema_budget_chars: int = 8000
    """Characters of CREATE statements and sample rows in the user prompt."""
    sample_rows: int = 3
    """Sample rows shown per table in the user prompt."""
    observation_rows: int = EnvConfig.observation_rows
    observation_chars: int = EnvConfig.observation_chars
    """Rows and characters of a tool result shown to the model."""
    max_context_tokens: int | None = 16_384
    """The episode ends (``context_full``) past this many tokens; None: at the model's own
    context (its ``max_position_embeddings``, or the vLLM engine's length; a preset's
    settings leave it so, a curriculum records the number its engine had)."""
    token_count: str = "model"
    """How the context is counted: ``model`` (the model's tokenizer over the chat-templated
    conversation and tools) or ``approx`` (4 characters a token, what a curriculum counts)."""
    max_new_tokens: int = 512
    """Tokens generated per turn."""
    temperature: float = 0.0
    """0: greedy decoding."""
    top_p: float = 1.0
    seed: int | None = None
    batch_size: int = 8
    """Episodes in flight, and conversations per generate call of a local model (batches
    are left-padded, so this can change greedy outputs in the last digits)."""
    dtype: str = "auto"
    """The dtype a local model generates in: ``float32``, ``bfloat16``, or ``auto``
    (bfloat16 where the device computes it natively, else float32; `ModelSettings.dtype`)."""
    tools: tuple[dict[str, Any], ...] = TOOLS
    """The tool schemas shown to the model, word for word."""
    semantics: str = EVAL_SEMANTICS.value
    """How submissions are scored (``official`` or ``strict``)."""
    written_by: str = ""
    """Who recorded these settings (a curriculum, its preset and stage); informational."""

    def __post_init__(self) -> None:
        if self.mode not in ("agent", "single"):
            raise EvalSettingsError(f"mode must be agent or single, not {self.mode!r}")
        if self.token_count not in TOKEN_COUNTS:
            raise EvalSettingsError(
                f"token_count must be one of {', '.join(TOKEN_COUNTS)}, not {self.token_count!r}"
            )
        if self.dtype not in DTYPES:
            raise EvalSettingsError(f"dtype must be one of {', '.join(DTYPES)}, not {self.dtype!r}")
        if self.batch_size < 1:  # the CLI's --concurrency
            raise EvalSettingsError(
                f"concurrency must be >= 1 (episodes in flight, batch_size), got {self.batch_size}"
            )
        for name in ("max_tool_calls", "max_new_tokens", "observation_rows"):
            if getattr(self, name) < 1:
                raise EvalSettingsError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("schema_budget_chars", "sample_rows", "observation_chars"):
            if getattr(self, name) < 0:
                raise EvalSettingsError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            raise EvalSettingsError(
                f"max_context_tokens must be >= 1 or null, got {self.max_context_tokens}"
            )
        if self.temperature < 0:
            raise EvalSettingsError(f"temperature must be >= 0, got {self.temperature}")
        Semantics.parse(self.semantics)

    # -- what the run is built from ------------------------------------------------------

    def generation(self) -> GenerationConfig:
        return GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
        )

    def env(self, context_length: int | None = None) -> EnvConfig:
        """The environment's settings; `context_length` (the generating model's) is the
        context budget when `max_context_tokens` is None."""
        context = self.max_context_tokens if self.max_context_tokens is not None else context_length
        return EnvConfig(
            mode=self.mode,  # type: ignore[arg-type]  # checked in __post_init__
            max_tool_calls=self.max_tool_calls,
            max_context_tokens=context,
            observation_rows=self.observation_rows,
            observation_chars=self.observation_chars,
            schema_budget_chars=self.schema_budget_chars,
            sample_rows=self.sample_rows,
        )

    def rollout(self, agent: Any = None) -> RolloutConfig:
        """Episodes in flight, the environment and the tools shown to the model; `agent`
        (its ``context_length``) sets the context budget when `max_context_tokens` is None."""
        env = self.env(getattr(agent, "context_length", None))
        return RolloutConfig(concurrency=self.batch_size, env=env, tools=self.tools)

    def token_counter(self, agent: Any) -> Callable[[Sequence[Message]], int] | None:
        """The environment's context counter for `agent`: its tokenizer over the
        conversation and `tools` (``model``, when it has one), else None (4 characters a
        token)."""
        return token_counter_for(agent, self.tools) if self.token_count == "model" else None

    def describe(self) -> str:
        """One line for a terminal: the settings that shape the prompt and the episodes."""
        limit = self.max_context_tokens
        context = "the model's own" if limit is None else f"{limit} tokens"
        context += f" ({self.token_count} count)"
        names = ", ".join(str(t.get("function", {}).get("name")) for t in self.tools)
        tools = "birdrl.env.tools" if self.tools == TOOLS else "descriptions as recorded"
        return (
            f"mode {self.mode}, schema {self.schema_budget_chars} chars, "
            f"{self.sample_rows} sample rows, {self.max_tool_calls} tool calls, context "
            f"{context}, {self.max_new_tokens} new tokens a turn, temperature "
            f"{self.temperature}, {self.batch_size} episodes in flight, dtype "
            f"{self.dtype}, tools {names} ({tools}), {self.semantics} semantics"
        )

    # -- the file --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["tools"] = [dict(t) for t in self.tools]
        return {"version": EVAL_SETTINGS_VERSION, **out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "settings") -> AgentEvalSettings:
        """Settings from `data` (a file's content; `where` names it in errors). Unknown keys
        and wrongly typed values are errors; keys a version-1 file lacks take the defaults."""
        if not isinstance(data, Mapping):
            raise EvalSettingsError(f"{where}: expected a JSON object")
        version = data.get("version")
        if not isinstance(version, int) or not 1 <= version <= EVAL_SETTINGS_VERSION:
            raise EvalSettingsError(
                f"{where}: version {version!r}; this birdrl reads versions 1 to "
                f"{EVAL_SETTINGS_VERSION} (a newer birdrl wrote it?)"
            )
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known) - {"version"})
        if unknown:
            raise EvalSettingsError(f"{where}: unknown settings {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name == "version":
                continue
            _check_type(name, value, cls.__dataclass_fields__[name].type, where)
            values[name] = value
        if "tools" in values:
            values["tools"] = tuple(dict(t) for t in values["tools"])
        if isinstance(values.get("temperature"), int):
            values["temperature"] = float(values["temperature"])
        if isinstance(values.get("top_p"), int):
            values["top_p"] = float(values["top_p"])
        try:
            return cls(**values)
        except EvalSettingsError as exc:
            raise EvalSettingsError(f"{where}: {exc}") from None

    def write(self, model_dir: str | Path) -> Path:
        """Write ``birdrl_eval.json`` into `model_dir`."""
        path = Path(model_dir) / EVAL_SETTINGS_FILE
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return path

    def with_overrides(self, **given: Any) -> AgentEvalSettings:
        """These settings with every value in `given` that is not None replacing its own."""
        return replace(self, **{k: v for k, v in given.items() if v is not None})


_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "int | None": (int, type(None)),
    "str | None": (str, type(None)),
    "tuple[dict[str, Any], ...]": (list,),
}


def _check_type(name: str, value: Any, annotation: Any, where: str) -> None:
    expected = _TYPES[str(annotation)]
    wrong = not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)
    if isinstance(value, list):
        wrong = wrong or not all(isinstance(t, dict) for t in value)
    if wrong:
        kind = " or ".join("null" if t is type(None) else t.__name__ for t in expected)
        raise EvalSettingsError(f"{where}: {name} must be {kind}, not {value!r}")


def read_eval_settings(model_dir: str | Path) -> AgentEvalSettings | None:
    """The settings recorded in `model_dir` (None when it has no ``birdrl_eval.json``)."""
    path = Path(model_dir) / EVAL_SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EvalSettingsError(
            f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return AgentEvalSettings.from_dict(data, str(path))


def recorded_settings(spec: str) -> tuple[AgentEvalSettings | None, str]:
    """The settings recorded for agent `spec` (None when there are none) and where they
    are, or where they were looked for: ``birdrl_eval.json`` in the model directory of an
    ``hf:DIR`` / ``vllm:DIR`` agent; for a hub id, the file in the hub cache (nothing is
    downloaded for it)."""
    kind = agent_kind(spec)
    target = spec.partition(":")[2]
    if kind not in ("hf", "vllm") or not target or target.strip().lower() in EMBEDDED_ALIASES:
        return None, f"{spec} has no model directory"
    if is_hub_id(target) and not Path(target).expanduser().exists():
        # a hub model: read the file from the cache if it is there, never download for it
        # (the agent fetches the model itself, with its own errors)
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(target, EVAL_SETTINGS_FILE, cache_dir=hub_cache_dir())
        if not isinstance(cached, str):
            return None, f"hub model {target} has no {EVAL_SETTINGS_FILE} in the hub cache"
        model_dir = Path(cached).parent
    else:
        model_dir = resolve_model(target)
    found = read_eval_settings(model_dir)
    if found is None:
        return None, f"{model_dir} has no {EVAL_SETTINGS_FILE}"
    by = f", written by {found.written_by}" if found.written_by else ""
    return found, f"{model_dir / EVAL_SETTINGS_FILE}{by}"


@dataclass(frozen=True)
class ChosenSettings:
    """The settings an evaluation runs with, where they come from and what the caller's
    options changed."""

    settings: AgentEvalSettings
    origin: str
    recorded: bool
    """Read from a model directory or taken from a preset (not ``birdrl eval``'s defaults)."""
    overridden: tuple[str, ...] = ()
    """The settings an option replaced."""

    def model_settings(self, given: ModelSettings, kind: str) -> ModelSettings:
        """How the model loads: `given` with these settings' dtype, and for a ``vllm``
        agent without its own ``max_model_len`` the engine's context set to a recorded
        context budget (the length the recording run's engine had)."""
        settings = replace(given, dtype=self.settings.dtype)
        context = self.settings.max_context_tokens
        if kind == "vllm" and given.max_model_len is None and self.recorded and context:
            settings = replace(settings, max_model_len=context)
        return settings

    def describe(self) -> str:
        given = f"; set by options: {', '.join(self.overridden)}" if self.overridden else ""
        return f"episode settings from {self.origin}{given}: {self.settings.describe()}"


def choose_eval_settings(
    spec: str, preset: tuple[AgentEvalSettings, str] | None = None, **options: Any
) -> ChosenSettings:
    """The settings agent `spec` is evaluated with: a `preset`'s (settings, name) when
    given, else those recorded beside its model (`recorded_settings`), else
    `AgentEvalSettings()`; every option in `options` that is not None (an
    `AgentEvalSettings` field) replaces its value."""
    if preset is not None:
        base, origin, recorded = preset[0], preset[1], True
    else:
        found, where = recorded_settings(spec)
        recorded = found is not None
        base = found if found is not None else AgentEvalSettings()
        origin = where if recorded else f"birdrl eval's defaults ({where})"
    given = {name: value for name, value in options.items() if value is not None}
    unknown = sorted(set(given) - {f.name for f in fields(AgentEvalSettings)})
    if unknown:
        raise EvalSettingsError(f"no such evaluation settings: {', '.join(unknown)}")
    changed = tuple(name for name, value in given.items() if getattr(base, name) != value)
    return ChosenSettings(base.with_overrides(**given), origin, recorded, changed)
