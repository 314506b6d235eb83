"""The four-stage curriculum end to end: build each stage's data, train, evaluate on the
held-out split, record, report.

A run directory holds ``config.json``, one ``stageN/`` folder per stage (``data/`` with
the stage dataset and its card, ``model/`` the trained model, ``eval_trajectories.jsonl`` the held-out episodes,
``record.json`` once the
stage is finished and evaluated, ``trainer/runs/`` the tensorboard logs) and ``report.md`` with
``plots/``. Each stage starts from the previous stage's ``model/``; with ``resume`` a
stage that has its ``record.json`` is skipped and an interrupted stage continues from its
last checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from birdrl.agents.base import GenerationConfig
from birdrl.agents.evaluate import evaluate_agent
from birdrl.agents.registry import make_agent
from birdrl.agents.rollout import RolloutConfig, write_trajectories
from birdrl.data.stages import (
    StageDataset,
    build_reasoning_sft,
    build_rl_prompts,
    build_tool_use_sft,
)
from birdrl.data.teachers import LLMTeacher, OfflineTeacher
from birdrl.env.prompts import build_text2sql_messages
from birdrl.env.sqlact import EnvConfig
from birdrl.evaluation.evaluator import EvalConfig
from birdrl.tasks.benchmark import Benchmark, open_benchmark
from birdrl.tasks.model import Task, TextToSQLTask
from birdrl.training.common import StageOutput
from birdrl.training.config import ConfigError, CurriculumConfig, config_to_dict
from birdrl.training.distributed import dist_context
from birdrl.training.grpo import mix_text2sql, run_grpo_stage
from birdrl.training.models import (
    load_policy,
    load_tokenizer,
    require_training,
    resolve_training_model,
)
from birdrl.training.report import StageRecord, write_report
from birdrl.training.sft import run_sft_stage

__all__ = ["STAGE_NAMES", "CurriculumResult", "evaluate_policy", "parse_stages", "run_curriculum"]

STAGE_NAMES = {
    0: "base model",
    1: "reasoning SFT",
    2: "tool-use SFT",
    3: "single-turn GRPO",
    4: "multi-turn GRPO",
}
Progress = Callable[[str], None]


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
        if not 1 <= first <= last <= 4:
            raise ConfigError(f"stages {spec!r}: stages are numbered 1 to 4")
        out.update(range(first, last + 1))
    return sorted(out)


def _limit(items: Sequence[Any], n: int | None) -> list[Any]:
    return list(items if n is None else items[:n])


def evaluate_policy(
    model_dir: Path | str,
    tasks: Sequence[Task],
    benchmark: Benchmark,
    config: CurriculumConfig,
    eval_config: EvalConfig | None = None,
    trajectories: Path | None = None,
) -> dict[str, Any]:
    """Success rate of the model at `model_dir` on `tasks` in the environment (agent mode,
    greedy), with the tool-capable chat template the training used; the episodes are
    written to `trajectories` (JSONL) when given."""
    from birdrl.agents.hf import HFAgent

    settings = config.evaluation
    tokenizer, _ = load_tokenizer(model_dir)
    agent = HFAgent.from_model(
        load_policy(model_dir, config.dtype),
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
    )
    result = evaluate_agent(tasks, benchmark.databases, agent, rollout, eval_config)
    if trajectories is not None:
        write_trajectories(trajectories, result.trajectories)
    summary = result.summary
    return {
        "mode": "agent",
        "n": summary.overall.total,
        "success_rate": summary.overall.rate,
        "per_category": {name: score.rate for name, score in summary.by_category.items()},
        "avg_turns": summary.extra.get("avg_turns"),
        "mean_reward": summary.mean_reward,
        "tool_call_validity": summary.extra.get("tool_call_validity"),
        "stop_reasons": summary.extra.get("stop_reasons"),
    }


class _Run:
    """One curriculum run; keeps the loaded benchmarks and the records."""

    def __init__(
        self,
        config: CurriculumConfig,
        run_dir: Path,
        progress: Progress | None,
        on_trainer: Callable[[int, Any], None] | None = None,
    ) -> None:
        self.config = config
        self.on_trainer = on_trainer
        self.dist = dist_context()
        self.run_dir = run_dir
        quiet = progress is None or not self.dist.is_main
        self.say: Progress = (lambda _msg: None) if quiet else progress  # type: ignore[assignment]
        cfg = config
        self.train = open_benchmark(cfg.tasks, cfg.db_root)
        self.held_out = open_benchmark(cfg.eval_tasks, cfg.db_root)
        self.debug_tasks = self.train.debugging_tasks()
        if not self.debug_tasks:
            raise ConfigError(f"{cfg.tasks}: no debugging tasks to train on")
        self.eval_tasks = _limit(self.held_out.debugging_tasks(), cfg.evaluation.limit)
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

    def record_path(self, stage: int) -> Path:
        return self.run_dir / f"stage{stage}" / "record.json"

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
        return write_report(
            self.run_dir,
            self.records,
            title=f"birdrl curriculum: {cfg.name}",
            config_summary=summary,
        )

    # -- stage data -------------------------------------------------------------------------

    def stage_data(self, stage: int) -> StageDataset:
        cfg, stage_cfg = self.config, getattr(self.config, f"stage{stage}")
        tasks = _limit(self.debug_tasks, stage_cfg.max_samples)
        dbs = self.train.databases
        prompt = cfg.prompt
        self.say(f"stage {stage}: building the dataset from {len(tasks)} tasks")
        if stage == 1:
            spec = stage_cfg.teacher
            teacher = (
                OfflineTeacher()
                if spec == "offline"
                else LLMTeacher(make_agent(spec), self.run_dir / "teacher-cache")
            )
            return build_reasoning_sft(
                tasks,
                dbs,
                teacher,
                source=f"{cfg.tasks}, teacher {spec}",
                eval_config=self.eval_config,
                sample_rows=prompt.sample_rows,
                budget_chars=prompt.schema_budget_chars,
            )
        if stage == 2:
            env = EnvConfig(
                mode="agent",
                schema_budget_chars=prompt.schema_budget_chars,
                sample_rows=prompt.sample_rows,
            )
            return build_tool_use_sft(
                tasks,
                dbs,
                make_agent(stage_cfg.teacher),
                source=f"{cfg.tasks}, teacher {stage_cfg.teacher}",
                rollout=RolloutConfig(env=env),
                eval_config=self.eval_config,
            )
        data = build_rl_prompts(
            tasks,
            dbs,
            stage=stage,
            source=cfg.tasks,
            sample_rows=prompt.sample_rows,
            budget_chars=prompt.schema_budget_chars,
        )
        for row in data.rows:
            row.pop("tools", None)  # stage 4: the environment's methods are the tools
            row["kind"] = "debug"
        if stage == 3 and self.text2sql:
            before = len(data.rows)
            data.rows = mix_text2sql(
                data.rows, self.text2sql_rows(), stage_cfg.text2sql_ratio, cfg.seed
            )
            data.notes.append(
                f"mixed in {len(data.rows) - before} text-to-SQL prompts from "
                f"{cfg.text2sql_tasks} ({stage_cfg.text2sql_ratio:g}:1), scored by execution accuracy"
            )
        return data

    def text2sql_rows(self) -> list[dict[str, Any]]:
        assert self.text2sql_bench is not None
        prompt = self.config.prompt
        return [
            {
                "prompt": build_text2sql_messages(
                    t,
                    self.text2sql_bench.databases[t.db_id],
                    sample_rows=prompt.sample_rows,
                    budget_chars=prompt.schema_budget_chars,
                ),
                "instance_id": t.instance_id,
                "db_id": t.db_id,
                "category": "text2sql",
                "kind": "text2sql",
            }
            for t in self.text2sql
        ]

    # -- stages -----------------------------------------------------------------------------

    def train_stage(self, stage: int, model: Path | str) -> StageOutput:
        cfg = self.config
        stage_cfg = getattr(cfg, f"stage{stage}")
        out_dir = self.run_dir / f"stage{stage}"
        if self.dist.is_main:  # the others read what it wrote (teachers are not asked twice)
            data = self.stage_data(stage)
            data.write(out_dir / "data")
            if not data.rows:
                raise ConfigError(f"stage {stage}: the dataset is empty ({dict(data.rejected)})")
        self.dist.barrier()
        with open(out_dir / "data" / "data.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        self.say(f"stage {stage} ({STAGE_NAMES[stage]}): training on {len(rows)} rows")
        hook = None
        if self.on_trainer is not None:
            user_hook = self.on_trainer

            def hook(trainer: Any) -> None:
                user_hook(stage, trainer)

        common: dict[str, Any] = {
            "stage": stage,
            "model_path": model,
            "rows": rows,
            "out_dir": out_dir,
            "config": cfg,
            "stage_config": stage_cfg,
            "progress": self.say,
            "on_trainer": hook,
        }
        if stage in (1, 2):
            return run_sft_stage(**common)
        tasks: dict[str, Task | TextToSQLTask] = {t.instance_id: t for t in self.debug_tasks}
        databases = dict(self.train.databases)
        if self.text2sql_bench is not None:
            tasks.update({t.instance_id: t for t in self.text2sql})
            databases.update(self.text2sql_bench.databases)
        judge = (
            make_agent(stage_cfg.judge) if stage_cfg.reward == "judge" and stage_cfg.judge else None
        )
        return run_grpo_stage(
            **common, tasks=tasks, databases=databases, judge=judge, eval_config=self.eval_config
        )

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
        )
        result["seconds"] = round(time.monotonic() - t0, 1)
        self.say(
            f"stage {stage}: success rate {result['success_rate']:.1%} "
            f"({result['n']} tasks, {result['seconds']:.0f} s)"
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
) -> CurriculumResult:
    """Run the selected stages in order (each from the previous stage's model), evaluating
    and reporting after each one. `on_trainer(stage, trainer)` runs just before each
    stage's training starts (extra callbacks, inspection)."""
    require_training()
    run = Path(run_dir).expanduser()
    dist = dist_context()
    if dist.is_main:
        _check_run_dir(run, config, resume)
    dist.barrier()
    state = _Run(config, run, progress, on_trainer)
    selected = sorted(set(stages))
    skipped: list[int] = []
    with dist.main_first():  # builds or converts the model once, then the others find it
        model: Path | str = resolve_training_model(config.model)
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
    for stage in range(1, 5):
        stage_cfg = getattr(config, f"stage{stage}")
        previous = state.load_record(stage)
        if previous is not None:
            state.say(f"stage {stage}: finished earlier, skipped (resume)")
            skipped.append(stage)
            state.save_record(previous)
            model = previous.model_dir
            continue
        if stage not in selected or not stage_cfg.enabled:
            continue
        output = state.train_stage(stage, model)
        model = output.model_dir
        evaluation = state.evaluate(stage, model)
        record = StageRecord(
            stage,
            STAGE_NAMES[stage],
            "sft" if stage <= 2 else "grpo",
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
