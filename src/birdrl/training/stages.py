"""The four curriculum stages as objects: each owns its section of the configuration,
builds its dataset in the shape its trainer reads, and trains.

`run_curriculum` walks `CURRICULUM` in order and never asks which stage it holds; what
differs between stages (teacher data or RL prompts, tool schemas or none, single answers or
episodes) is said once, here. Every stage evaluates through the run (`Stage.evaluate`),
the same way as the base model, so the report compares like with like. A stage reads what the run has loaded through `StageContext`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from birdrl.agents.registry import make_agent
from birdrl.agents.rollout import RolloutConfig
from birdrl.data.difficulty import easy_first
from birdrl.data.stages import (
    StageDataset,
    build_reasoning_sft,
    build_rl_prompts,
    build_tool_use_sft,
)
from birdrl.data.teachers import LLMTeacher, OfflineTeacher, Teacher
from birdrl.env.prompts import build_text2sql_messages
from birdrl.env.sqlact import EnvConfig
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.tasks.benchmark import Benchmark, load_source_tasks, split_source
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.tasks.subset import stratified_subset
from birdrl.training.common import StageJob, StageOutput
from birdrl.training.config import CurriculumConfig, GRPOStageConfig, SFTStageConfig
from birdrl.training.grpo import (
    EpisodeRollouts,
    Rollouts,
    SingleTurnRollouts,
    mix_text2sql,
    run_grpo_stage,
)
from birdrl.training.sft import run_sft_stage

__all__ = [
    "CURRICULUM",
    "GRPOStage",
    "MultiTurnGRPO",
    "ReasoningSFT",
    "SingleTurnGRPO",
    "Stage",
    "StageContext",
    "ToolUseSFT",
    "TrainingTasks",
    "curriculum_stage",
]

SettingsT = TypeVar("SettingsT", SFTStageConfig, GRPOStageConfig)


@dataclass(frozen=True)
class TrainingTasks:
    """The tasks a stage trains on: its task source (``stageN.tasks``, else the run's
    ``tasks``), opened."""

    source: str
    benchmark: Benchmark
    tasks: list[Task]
    """The source's debugging tasks."""


class StageContext(Protocol):
    """What a stage reads from its run: the configuration, each stage's training tasks and
    databases, and where to say what it does."""

    @property
    def config(self) -> CurriculumConfig: ...
    @property
    def run_dir(self) -> Path: ...
    def training(self, stage: int) -> TrainingTasks:
        """Stage `stage`'s training tasks (`CurriculumConfig.stage_tasks`)."""
        ...

    @property
    def text2sql(self) -> Sequence[TextToSQLTask]: ...
    @property
    def text2sql_bench(self) -> Benchmark | None: ...
    @property
    def reward_config(self) -> EvalConfig:
        """Scoring of rewards and teacher data (``reward_semantics``)."""
        ...

    def issue_credit(self, stage: int) -> dict[str, float]:
        """The share of hidden tests each of stage `stage`'s training tasks' buggy SQL
        passes."""
        ...

    def say(self, message: str) -> None: ...
    def evaluate(self, stage: int, model: Path | str) -> dict[str, Any] | None:
        """`model` on the held-out split, recorded as stage `stage` (None: not evaluated)."""
        ...

    def counter(self, label: str, total: int) -> Callable[[Any], None] | None:
        """A per-episode progress callback for `label` (None without a listener)."""
        ...


class Stage(ABC, Generic[SettingsT]):
    """One stage of the curriculum. `build_data` and `train` are what a run calls; a
    subclass supplies its configuration section, its dataset and its trainer."""

    number: ClassVar[int]
    """Its place in the curriculum: the ``stageN`` directory, config key and labels."""
    name: ClassVar[str]
    kind: ClassVar[str]
    """The trainer family, ``sft`` or ``grpo``, as the stage's record names it."""

    @abstractmethod
    def settings(self, config: CurriculumConfig) -> SettingsT:
        """This stage's section of `config` (``config.stageN``)."""

    def select_tasks(self, ctx: StageContext) -> list[Task]:
        """``max_samples`` training tasks taken across databases and categories; with
        ``samples_per_source``, that many of each joined source, taken the same way."""
        settings = self.settings(ctx.config)
        train = ctx.training(self.number)
        quotas: list[int] | None = getattr(settings, "samples_per_source", None)
        if quotas is None:
            return stratified_subset(train.tasks, settings.max_samples, ctx.config.seed)
        chosen: list[Task] = []  # one count per source: CurriculumConfig checked it
        for part, quota in zip(split_source(train.source), quotas, strict=True):
            ids = {t.instance_id for t in load_source_tasks(part).tasks}
            mine = [t for t in train.tasks if t.instance_id in ids]
            chosen += stratified_subset(mine, quota, ctx.config.seed)
        return chosen

    def build_data(self, ctx: StageContext) -> StageDataset:
        """The stage's dataset from its selected training tasks."""
        tasks = self.select_tasks(ctx)
        source = ctx.training(self.number).source
        ctx.say(f"stage {self.number}: building the dataset from {len(tasks)} tasks of {source}")
        return self.dataset(ctx, tasks)

    @abstractmethod
    def dataset(self, ctx: StageContext, tasks: Sequence[Task]) -> StageDataset:
        """Rows built from `tasks`, in the shape this stage's trainer reads."""

    @abstractmethod
    def train(self, ctx: StageContext, job: StageJob[SettingsT]) -> StageOutput:
        """Train ``job.model_path`` on ``job.rows`` (the dataset as written to disk)."""

    def evaluate(self, ctx: StageContext, model: Path | str) -> dict[str, Any] | None:
        """The trained `model` on the held-out split. The same measurement for every stage
        (and the base model), so the report compares like with like."""
        return ctx.evaluate(self.number, model)


# -- supervised stages ----------------------------------------------------------------------


class ReasoningSFT(Stage[SFTStageConfig]):
    """Stage 1: imitate a teacher's verified diagnosis and fix, single-turn."""

    number: ClassVar[int] = 1
    name: ClassVar[str] = "reasoning SFT"
    kind: ClassVar[str] = "sft"

    def settings(self, config: CurriculumConfig) -> SFTStageConfig:
        return config.stage1

    def dataset(self, ctx: StageContext, tasks: Sequence[Task]) -> StageDataset:
        cfg, spec = ctx.config, ctx.config.stage1.teacher
        teacher: Teacher = (
            OfflineTeacher()
            if spec == "offline"
            else LLMTeacher(make_agent(spec), ctx.run_dir / "teacher-cache")
        )
        train = ctx.training(self.number)
        return build_reasoning_sft(
            tasks,
            train.benchmark.databases,
            teacher,
            source=f"{train.source}, teacher {spec}",
            eval_config=ctx.reward_config,
            progress=ctx.counter(f"stage 1: teacher ({spec})", len(tasks)),
            sample_rows=cfg.prompt.sample_rows,
            budget_chars=cfg.prompt.schema_budget_chars,
        )

    def train(self, ctx: StageContext, job: StageJob[SFTStageConfig]) -> StageOutput:
        return run_sft_stage(job)


class ToolUseSFT(Stage[SFTStageConfig]):
    """Stage 2: imitate a teacher's solved episodes in the environment, rendered with the
    tool schemas stage 4 will show."""

    number: ClassVar[int] = 2
    name: ClassVar[str] = "tool-use SFT"
    kind: ClassVar[str] = "sft"

    def settings(self, config: CurriculumConfig) -> SFTStageConfig:
        return config.stage2

    def dataset(self, ctx: StageContext, tasks: Sequence[Task]) -> StageDataset:
        cfg, spec = ctx.config, ctx.config.stage2.teacher
        env = EnvConfig(
            mode="agent",
            schema_budget_chars=cfg.prompt.schema_budget_chars,
            sample_rows=cfg.prompt.sample_rows,
        )
        train = ctx.training(self.number)
        return build_tool_use_sft(
            tasks,
            train.benchmark.databases,
            make_agent(spec),
            source=f"{train.source}, teacher {spec}",
            rollout=RolloutConfig(env=env),
            eval_config=ctx.reward_config,
            progress=ctx.counter(f"stage 2: teacher ({spec})", len(tasks)),
        )

    def train(self, ctx: StageContext, job: StageJob[SFTStageConfig]) -> StageOutput:
        return run_sft_stage(job, with_tools=True)


# -- GRPO stages ----------------------------------------------------------------------------


class GRPOStage(Stage[GRPOStageConfig]):
    """What both GRPO stages share: task order, prompt rows, the trainer; a subclass
    chooses its `Rollouts` (and may add rows)."""

    kind: ClassVar[str] = "grpo"

    def select_tasks(self, ctx: StageContext) -> list[Task]:
        """``easy-first`` puts tasks whose buggy SQL already earns partial credit first (so
        rewards vary within groups); otherwise stratified like the SFT stages."""
        settings = self.settings(ctx.config)
        if settings.task_order != "easy-first":
            return super().select_tasks(ctx)
        credit = ctx.issue_credit(self.number)
        pool = ctx.training(self.number).tasks
        tasks = easy_first(pool, credit, settings.max_samples, ctx.config.seed)
        easy = sum(credit.get(t.instance_id, 0.0) > 0 for t in tasks)
        ctx.say(
            f"stage {self.number}: easy first: {easy} of {len(tasks)} tasks earn partial credit"
        )
        return tasks

    def dataset(self, ctx: StageContext, tasks: Sequence[Task]) -> StageDataset:
        """The RL prompt rows of `tasks`, each marked ``kind = "debug"`` for the reward;
        without a ``tools`` column, which TRL does not read (stage 4's tools are the
        environment's methods)."""
        prompt = ctx.config.prompt
        train = ctx.training(self.number)
        data = build_rl_prompts(
            tasks,
            train.benchmark.databases,
            stage=self.number,
            source=train.source,
            sample_rows=prompt.sample_rows,
            budget_chars=prompt.schema_budget_chars,
            with_tools=False,
        )
        for row in data.rows:
            row["kind"] = "debug"
        return data

    @abstractmethod
    def rollouts(self, ctx: StageContext) -> Rollouts:
        """How this stage's completions are produced and scored."""

    def train(self, ctx: StageContext, job: StageJob[GRPOStageConfig]) -> StageOutput:
        return run_grpo_stage(job, self.rollouts(ctx))


class SingleTurnGRPO(GRPOStage):
    """Stage 3: one answer per prompt, scored by the configured reward; text-to-SQL
    prompts may be mixed in."""

    number: ClassVar[int] = 3
    name: ClassVar[str] = "single-turn GRPO"

    def settings(self, config: CurriculumConfig) -> GRPOStageConfig:
        return config.stage3

    def dataset(self, ctx: StageContext, tasks: Sequence[Task]) -> StageDataset:
        data = super().dataset(ctx, tasks)
        bench, ratio = ctx.text2sql_bench, ctx.config.stage3.text2sql_ratio
        if bench is None or not ctx.text2sql:
            return data
        before = len(data.rows)
        data.rows = mix_text2sql(data.rows, _text2sql_rows(ctx, bench), ratio, ctx.config.seed)
        data.notes.append(
            f"mixed in {len(data.rows) - before} text-to-SQL prompts from "
            f"{ctx.config.text2sql_tasks} ({ratio:g}:1), scored by execution accuracy"
        )
        return data

    def rollouts(self, ctx: StageContext) -> Rollouts:
        settings = ctx.config.stage3
        train = ctx.training(self.number)
        tasks: dict[str, Task | TextToSQLTask] = {t.instance_id: t for t in train.tasks}
        databases = dict(train.benchmark.databases)
        if ctx.text2sql_bench is not None:
            tasks.update({t.instance_id: t for t in ctx.text2sql})
            databases.update(ctx.text2sql_bench.databases)
        judge = (
            make_agent(settings.judge) if settings.reward == "judge" and settings.judge else None
        )
        return SingleTurnRollouts(
            tasks=tasks, databases=databases, judge=judge, eval_config=ctx.reward_config
        )


def _text2sql_rows(ctx: StageContext, bench: Benchmark) -> list[dict[str, Any]]:
    """Single-turn text-to-SQL prompts, marked ``kind = "text2sql"`` for the reward."""
    prompt = ctx.config.prompt
    return [
        {
            "prompt": build_text2sql_messages(
                t,
                bench.databases[t.db_id],
                sample_rows=prompt.sample_rows,
                budget_chars=prompt.schema_budget_chars,
            ),
            "instance_id": t.instance_id,
            "db_id": t.db_id,
            "category": "text2sql",
            "kind": "text2sql",
        }
        for t in ctx.text2sql
    ]


class MultiTurnGRPO(GRPOStage):
    """Stage 4: whole episodes in the environment, rewarded by the submission's pass rate."""

    number: ClassVar[int] = 4
    name: ClassVar[str] = "multi-turn GRPO"

    def settings(self, config: CurriculumConfig) -> GRPOStageConfig:
        return config.stage4

    def rollouts(self, ctx: StageContext) -> Rollouts:
        train = ctx.training(self.number)
        return EpisodeRollouts(
            tasks={t.instance_id: t for t in train.tasks},
            databases=train.benchmark.databases,
            eval_config=ctx.reward_config,
        )


CURRICULUM: tuple[Stage[Any], ...] = (
    ReasoningSFT(),
    ToolUseSFT(),
    SingleTurnGRPO(),
    MultiTurnGRPO(),
)
"""The stages in the order a run trains them (stateless: one instance serves every run)."""


def curriculum_stage(number: int) -> Stage[Any]:
    """The stage numbered `number` (1..4)."""
    for stage in CURRICULUM:
        if stage.number == number:
            return stage
    raise ValueError(f"no curriculum stage {number}; stages are numbered 1 to {len(CURRICULUM)}")
