"""The four-stage curriculum end to end: for each stage of
`birdrl.training.stages.CURRICULUM` in order, build its data, train, evaluate on the
held-out split, record, report.

A run directory holds ``config.json``, one ``stageN/`` folder per stage (``data/`` with
the stage dataset and its card, ``model/`` the trained model, ``eval_trajectories.jsonl``
the held-out episodes, ``record.json`` once the stage is finished and evaluated,
``trainer/runs/`` the tensorboard logs) and ``report.md`` with ``plots/``. Each stage
starts from the previous stage's ``model/``; with ``resume`` a stage that has its
``record.json`` is skipped and an interrupted stage continues from its last checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from birdrl.agents.base import GenerationConfig
from birdrl.agents.evaluate import AgentEvalResult, evaluate_agent
from birdrl.agents.rollout import RolloutConfig, Trajectory, write_trajectories
from birdrl.data.difficulty import issue_sql_credit
from birdrl.data.stages import StageDataset
from birdrl.env.sqlact import EnvConfig
from birdrl.env.types import StopReason
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.tasks.subset import stratified_subset
from birdrl.training.allocator import keep_freed_memory
from birdrl.training.budgets import BudgetCheck, check_budgets
from birdrl.training.common import StageJob, StageOutput
from birdrl.training.config import ConfigError, CurriculumConfig, config_to_dict
from birdrl.training.distributed import dist_context
from birdrl.training.environment import tool_schemas
from birdrl.training.models import (
    load_policy,
    load_tokenizer,
    require_training,
    resolve_training_model,
    use_cuda,
)
from birdrl.training.report import StageRecord, write_report
from birdrl.training.stages import CURRICULUM, Stage, curriculum_stage
from birdrl.view.build import build_view

__all__ = [
    "STAGE_NAMES",
    "CurriculumResult",
    "episode_outcomes",
    "evaluate_policy",
    "parse_stages",
    "run_curriculum",
]

STAGE_NAMES = {0: "base model", **{stage.number: stage.name for stage in CURRICULUM}}
Progress = Callable[[str], None]
EpisodeProgress = Callable[[str, int, int], None]
"""``(label, done, total)``: episodes of a countable piece of work (a held-out evaluation,
the teachers' episodes) have finished; ``done = 0`` announces the work."""


@dataclass
class CurriculumResult:
    run_dir: Path
    records: list[StageRecord]
    report: Path
    skipped: list[int]
    """Stages found finished in the run directory (resume) and not run again."""


def parse_stages(spec: str) -> list[int]:
    """``1-4``, ``3``, ``1,2`` → sorted stage numbers (1..4)."""
    out: set[int] = set()
    for part in spec.replace(" ", "").split(","):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ConfigError(f"stages {spec!r}: expected e.g. 1-4, 3 or 1,2") from None
        if not 1 <= first <= last <= len(CURRICULUM):
            raise ConfigError(f"stages {spec!r}: stages are numbered 1 to {len(CURRICULUM)}")
        out.update(range(first, last + 1))
    return sorted(out)


def evaluate_policy(
    model_dir: Path | str,
    tasks: Sequence[Task],
    benchmark: Benchmark,
    config: CurriculumConfig,
    eval_config: EvalConfig | None = None,
    trajectories: Path | None = None,
    progress: Callable[[Trajectory], None] | None = None,
) -> dict[str, Any]:
    """Success rate of the model at `model_dir` on `tasks` in the environment (agent mode,
    greedy), with the tool-capable chat template the training used; the episodes are
    written to `trajectories` (JSONL) when given, and `progress` is called with each one
    as it finishes. Besides SR per category, the summary holds the mean reward (test pass
    rate), tool-call validity, the share of episodes that called ``submit_solution``
    (``submission_rate``), stop reasons, and ``per_task``: each task's outcome."""
    from birdrl.agents.hf import HFAgent

    settings = config.evaluation
    tokenizer, _ = load_tokenizer(model_dir)
    # bf16 weights for generation only: decoding reads every weight and cached key once
    # per token, so on a CPU half the bytes is close to half the time
    agent = HFAgent.from_model(
        load_policy(model_dir, "bfloat16" if config.bf16_generation else config.dtype),
        tokenizer,
        generation=GenerationConfig(max_new_tokens=settings.max_new_tokens, seed=config.seed),
        batch_size=settings.batch_size,
        name=f"hf:{Path(str(model_dir)).parent.name}",
    )
    rollout = RolloutConfig(
        concurrency=settings.batch_size,
        env=EnvConfig(
            mode="agent",
            max_tool_calls=settings.max_tool_calls,
            max_context_tokens=agent.context_length,
            schema_budget_chars=config.prompt.schema_budget_chars,
            sample_rows=config.prompt.sample_rows,
        ),
        tools=tuple(tool_schemas()),  # the tools stages 2 and 4 trained with, word for word
    )
    result = evaluate_agent(tasks, benchmark.databases, agent, rollout, eval_config, progress)
    if trajectories is not None:
        write_trajectories(trajectories, result.trajectories)
    return policy_summary(result)


def policy_summary(result: AgentEvalResult) -> dict[str, Any]:
    """The evaluation dict a stage record keeps (rates as fractions, 0..1)."""
    summary = result.summary
    return {
        "mode": "agent",
        "n": summary.overall.total,
        # fractions (0..1), as the report and the CLI read them (Score.rate is a percent)
        "success_rate": summary.overall.rate / 100,
        "per_category": {name: score.rate / 100 for name, score in summary.by_category.items()},
        "avg_turns": summary.extra.get("avg_turns"),
        "mean_reward": summary.mean_reward,
        "tool_call_validity": summary.extra.get("tool_call_validity"),
        "stop_reasons": summary.extra.get("stop_reasons"),
        **episode_outcomes(result.trajectories),
    }


def episode_outcomes(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """``submitted`` / ``submission_rate`` (episodes that called ``submit_solution``, scored
    or not) and ``per_task``: ``{instance_id: {db_id, category, reward, success,
    stop_reason, tool_calls, invalid_tool_calls}}`` for the report's outcome matrix."""
    submitted = sum(t.stop_reason == StopReason.SUBMITTED for t in trajectories)
    return {
        "submitted": submitted,
        "submission_rate": submitted / len(trajectories) if trajectories else None,
        "per_task": {
            t.instance_id: {
                "db_id": t.db_id,
                "category": t.category,
                "reward": t.reward,
                "success": t.success,
                "stop_reason": t.stop_reason,
                "tool_calls": t.tool_calls,
                "invalid_tool_calls": t.invalid_tool_calls,
            }
            for t in trajectories
        },
    }


class _Run:
    """One curriculum run; keeps the loaded benchmarks and the records, and is the
    `StageContext` its stages read them through."""

    def __init__(
        self,
        config: CurriculumConfig,
        run_dir: Path,
        progress: Progress | None,
        on_trainer: Callable[[int, Any], None] | None = None,
        episode_progress: EpisodeProgress | None = None,
    ) -> None:
        self.config = config
        self.on_trainer = on_trainer
        self.dist = dist_context()
        self.run_dir = run_dir
        quiet = progress is None or not self.dist.is_main
        self.say: Progress = (lambda _msg: None) if quiet else progress  # type: ignore[assignment]
        self.episode_progress = None if not self.dist.is_main else episode_progress
        self.built: dict[int, StageDataset] = {}
        """Stage datasets built ahead of their stage (for the budget checks)."""
        self.budget_checks: list[BudgetCheck] | None = None
        cfg = config
        self.train = open_benchmark(cfg.tasks, cfg.db_root)
        self.held_out = open_benchmark(cfg.eval_tasks, cfg.db_root)
        self.debug_tasks = self.train.debugging_tasks()
        if not self.debug_tasks:
            raise ConfigError(f"{cfg.tasks}: no debugging tasks to train on")
        self.eval_tasks = stratified_subset(
            self.held_out.debugging_tasks(), cfg.evaluation.limit, cfg.seed
        )
        self.text2sql: list[TextToSQLTask] = []
        self.text2sql_bench: Benchmark | None = None
        if cfg.stage3.text2sql_ratio > 0:
            if not cfg.text2sql_tasks:
                raise ConfigError("stage3.text2sql_ratio > 0 needs text2sql_tasks")
            self.text2sql_bench = open_benchmark(cfg.text2sql_tasks, cfg.db_root)
            self.text2sql = self.text2sql_bench.text_to_sql_tasks()
        if cfg.stage4.text2sql_ratio > 0:
            raise ConfigError(
                "stage4.text2sql_ratio: text-to-SQL mixing applies to stage 3 (single-turn) only"
            )
        self.eval_config = EvalConfig(workers=2)
        self.records: list[StageRecord] = []

    def counter(self, label: str, total: int) -> Callable[[Any], None] | None:
        """A per-episode callback reporting `label`'s progress (None without a listener)."""
        report = self.episode_progress
        if report is None:
            return None
        done = 0
        report(label, done, total)

        def tick(_item: Any) -> None:
            nonlocal done
            done += 1
            report(label, done, total)

        return tick

    def check_budgets(self, model: Path | str, stages: Sequence[int]) -> list[BudgetCheck]:
        """Check the budgets of the stages still to run (`stages`) and of the evaluation
        against the stage-1 and stage-2 data: built now for a stage that will run (and kept
        for it), read from the run directory for a finished one; warns for each misfit."""
        rows: dict[int, list[dict[str, Any]]] = {}
        for stage in (1, 2):
            saved = self.data_path(stage)
            if saved.is_file():  # a finished stage's, or one built earlier for this config
                with open(saved, encoding="utf-8") as f:
                    rows[stage] = [json.loads(line) for line in f]
            elif stage in stages:
                self.built[stage] = self.stage_data(stage)
                rows[stage] = self.built[stage].rows
        tokenizer, _ = load_tokenizer(model)
        checks = check_budgets(self.config, rows, tokenizer, stages)
        misfits = [c for c in checks if not c.ok]
        self.say(
            f"budgets: {len(checks)} limit(s) checked against the teacher data, "
            + (f"{len(misfits)} too small" if misfits else "all fit")
            if checks
            else "budgets: no stage-1 or stage-2 data to check the limits against"
        )
        for check in misfits:
            self.say(f"warning: {check.message}")
        self.budget_checks = checks
        return checks

    @cached_property
    def issue_credit(self) -> dict[str, float]:
        """The share of hidden tests each training task's buggy SQL passes (easy-first
        order), measured once per run: stages 3 and 4 share it."""
        return issue_sql_credit(self.debug_tasks, self.train.databases, self.eval_config)

    def record_path(self, stage: int) -> Path:
        return self.run_dir / f"stage{stage}" / "record.json"

    def data_path(self, stage: int) -> Path:
        """The stage's dataset; once written it is reused (a resumed run, an ablation
        variant): a dataset is a function of the config, which a run keeps fixed."""
        return self.run_dir / f"stage{stage}" / "data" / "data.jsonl"

    def load_record(self, stage: int) -> StageRecord | None:
        path = self.record_path(stage)
        if not path.is_file():
            return None
        record = StageRecord.from_dict(json.loads(path.read_text(encoding="utf-8")))
        if record.kind != "base" and not (Path(record.model_dir) / "config.json").is_file():
            return None  # the model was removed: redo the stage
        return record

    def save_record(self, record: StageRecord) -> None:
        if self.dist.is_main:
            path = self.record_path(record.stage)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record.to_dict(), indent=1), encoding="utf-8")
        self.records = [r for r in self.records if r.stage != record.stage] + [record]
        self.records.sort(key=lambda r: r.stage)

    def report(self) -> Path:
        if not self.dist.is_main:
            return self.run_dir / "report.md"
        cfg = self.config
        summary = {
            "preset": cfg.name,
            "model": cfg.model,
            "train tasks": f"{cfg.tasks} ({len(self.debug_tasks)} debugging tasks)",
            "held-out tasks": f"{cfg.eval_tasks} ({len(self.eval_tasks)} evaluated, agent mode)",
            "fine-tuning": f"LoRA r={cfg.lora.r}" if cfg.lora.enabled else "full",
            "stage 3 reward": cfg.stage3.reward,
            "stage 4 KL beta": cfg.stage4.beta,
        }
        report = write_report(
            self.run_dir,
            self.records,
            title=f"birdrl curriculum: {cfg.name}",
            config_summary=summary,
            held_out=[
                {"instance_id": t.instance_id, "db_id": t.db_id, "category": t.category.value}
                for t in self.eval_tasks
            ],
            budgets=None
            if self.budget_checks is None
            else [c.to_dict() for c in self.budget_checks],
        )
        # the browsable view of the same run, next to report.md (birdrl view RUN rebuilds it)
        build_view(
            [self.run_dir], self.run_dir / "view", tasks={t.instance_id: t for t in self.eval_tasks}
        )
        return report

    def stage_data(self, stage: int) -> StageDataset:
        """Stage `stage`'s dataset, built now."""
        return curriculum_stage(stage).build_data(self)

    def train_stage(self, stage: Stage[Any], model: Path | str) -> StageOutput:
        """Write (or reuse) the stage's dataset on the main process, then train on it on
        every process, starting from `model`."""
        n = stage.number
        out_dir = self.run_dir / f"stage{n}"
        data_path = self.data_path(n)
        if self.dist.is_main:  # the others read what it wrote (teachers are not asked twice)
            data = self.built.pop(n, None)
            if data is None and data_path.is_file():
                self.say(f"stage {n}: reusing the dataset in {data_path.parent}")
            else:
                data = data or stage.build_data(self)
                data.write(out_dir / "data")
                if not data.rows:
                    raise ConfigError(f"stage {n}: the dataset is empty ({dict(data.rejected)})")
        self.dist.barrier()
        with open(data_path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        if not rows:
            raise ConfigError(f"stage {n}: the dataset {data_path} is empty")
        self.say(f"stage {n} ({stage.name}): training on {len(rows)} rows")
        hook = None
        if self.on_trainer is not None:
            user_hook = self.on_trainer

            def hook(trainer: Any) -> None:
                user_hook(n, trainer)

        settings = stage.settings(self.config)
        job = StageJob(n, model, rows, out_dir, self.config, settings, self.say, hook)
        return stage.train(self, job)

    def evaluate(self, stage: int, model: Path | str) -> dict[str, Any] | None:
        """Evaluate on the main process (the others wait at the next barrier)."""
        if not self.dist.is_main:
            return None
        self.say(f"stage {stage}: evaluating on {len(self.eval_tasks)} held-out tasks")
        t0 = time.monotonic()
        result = evaluate_policy(
            model,
            self.eval_tasks,
            self.held_out,
            self.config,
            self.eval_config,
            trajectories=self.run_dir / f"stage{stage}" / "eval_trajectories.jsonl",
            progress=self.counter(f"stage {stage}: evaluating", len(self.eval_tasks)),
        )
        result["seconds"] = round(time.monotonic() - t0, 1)
        self.say(
            f"stage {stage}: success rate {result['success_rate']:.1%}, mean reward "
            f"{result['mean_reward']:.3f}, {result['submitted']} of {result['n']} episodes "
            f"submitted ({result['seconds']:.0f} s)"
        )
        return result


def _check_run_dir(run_dir: Path, config: CurriculumConfig, resume: bool) -> None:
    saved = run_dir / "config.json"
    current = config_to_dict(config)
    if saved.is_file():
        if not resume:
            raise ConfigError(
                f"{run_dir} already holds a curriculum run; pass --resume to continue it "
                "or choose another output directory"
            )
        previous = json.loads(saved.read_text(encoding="utf-8"))
        changed = sorted(k for k in current if previous.get(k) != current[k])
        # settings of stages that have not started yet may change; nothing else may
        fixed = [k for k in changed if not (k.startswith("stage") and not (run_dir / k).exists())]
        if fixed:
            raise ConfigError(
                f"{run_dir}: the configuration differs from the run being resumed in "
                f"settings that finished or started stages used (changed: {', '.join(fixed)}); "
                "use a new output directory (only stages not yet started may be reconfigured)"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps(current, indent=1), encoding="utf-8")


def run_curriculum(
    config: CurriculumConfig,
    run_dir: str | Path,
    *,
    stages: Iterable[int] = (1, 2, 3, 4),
    resume: bool = False,
    progress: Progress | None = None,
    on_trainer: Callable[[int, Any], None] | None = None,
    episode_progress: EpisodeProgress | None = None,
) -> CurriculumResult:
    """Run the selected stages in order (each from the previous stage's model), evaluating
    and reporting after each one. `on_trainer(stage, trainer)` runs just before each
    stage's training starts (extra callbacks, inspection). Before anything runs, the
    budgets are checked against the stage data (`birdrl.training.budgets`): `progress`
    gets a ``warning: ...`` line for each limit the teacher's samples do not fit in.
    `episode_progress(label, done, total)` follows evaluations and teacher episodes.
    On a CPU, glibc is told to keep freed memory (`birdrl.training.allocator`)."""
    require_training()
    if not use_cuda():
        keep_freed_memory()
    run = Path(run_dir).expanduser()
    dist = dist_context()
    if dist.is_main:
        _check_run_dir(run, config, resume)
    dist.barrier()
    state = _Run(config, run, progress, on_trainer, episode_progress)
    selected = sorted(set(stages))
    skipped: list[int] = []
    with dist.main_first():  # builds or converts the model once, then the others find it
        model: Path | str = resolve_training_model(config.model)
    if dist.is_main:  # before the first evaluation: a misfit is reported in seconds
        pending = [
            s.number
            for s in CURRICULUM
            if s.number in selected
            and s.settings(config).enabled
            and state.load_record(s.number) is None
        ]
        state.check_budgets(model, pending)
    if config.evaluation.base_model:
        record = state.load_record(0)
        if record is None:
            t0 = time.monotonic()
            evaluation = state.evaluate(0, model)
            record = StageRecord(
                0, STAGE_NAMES[0], "base", str(model), time.monotonic() - t0, [], evaluation, []
            )
            state.save_record(record)
        else:
            skipped.append(0)
            state.records.append(record)
        state.report()
        dist.barrier()
    for stage in CURRICULUM:
        previous = state.load_record(stage.number)
        if previous is not None:
            state.say(f"stage {stage.number}: finished earlier, skipped (resume)")
            skipped.append(stage.number)
            state.save_record(previous)
            model = previous.model_dir
            continue
        if stage.number not in selected or not stage.settings(config).enabled:
            continue
        output = state.train_stage(stage, model)
        model = output.model_dir
        evaluation = stage.evaluate(state, model)
        record = StageRecord(
            stage.number,
            stage.name,
            stage.kind,
            str(model),
            output.seconds,
            output.log_history,
            evaluation,
            output.notes,
        )
        state.save_record(record)
        state.report()
        dist.barrier()  # the next stage's data and skip decisions come from these files
    return CurriculumResult(run, state.records, state.report(), skipped)
