#!/usr/bin/env bash
# GRPO on verl with birdrl's data, reward and tools. Validated against verl 0.9.x (0.9.0 and
# 0.9.1): tests/test_verl_backend.py runs this very script with `python3 -m
# verl.trainer.main_ppo` intercepted, composes verl's packaged trainer config with the
# arguments it passed and runs verl's own config checks (validate_config, the config
# dataclasses, the custom reward function's loader). It has not been run on a GPU: no
# Ray cluster, vLLM rollout or training step has run here. Other verl versions are
# refused (verl's config keys changed between 0.7 and 0.9); set BIRDRL_VERL_ANY_VERSION=1
# to try one anyway.
# Usage: STAGE=4 bash run_grpo.sh [extra hydra overrides]
set -euo pipefail

STAGE=${STAGE:-4}                      # 3: single turn (<answer> block), 4: tools
OUT=${OUT:-$HOME/data/birdrl-verl}
MODEL=${MODEL:-Qwen/Qwen2.5-Coder-7B-Instruct}
GPUS=${GPUS:-8}                        # GPUs on this node
TRAIN_TASKS=${TRAIN_TASKS:-bundled:train}  # exported as data.train_files
VAL_TASKS=${VAL_TASKS:-bundled:test}       # exported as data.val_files (validated before training)
BATCH=${BATCH:-32}                     # data.train_batch_size: tasks a step
ROLLOUT_N=${ROLLOUT_N:-8}              # rollout.n: episodes a task (the GRPO group)
AGENT_WORKERS=${AGENT_WORKERS:-8}      # rollout.agent.num_workers: processes running the tools
HERE=$(cd "$(dirname "$0")" && pwd)
# The birdrl config every verl process reads (tasks, databases, evaluator, replica pool).
# Copy birdrl_verl.json, edit it and set BIRDRL_VERL_CONFIG to it: the reward gets it as
# reward_kwargs, the tools (and the reward) through every Ray worker's environment.
export BIRDRL_VERL_CONFIG=${BIRDRL_VERL_CONFIG:-$HERE/birdrl_verl.json}

# 0. The verl this script was validated against.
if [ "${BIRDRL_VERL_ANY_VERSION:-0}" != 1 ]; then
  python3 - <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    found = version("verl")
except PackageNotFoundError:
    sys.exit("run_grpo.sh: verl is not installed (validated with verl>=0.9,<0.10)")
if not found.startswith("0.9."):
    sys.exit(f"run_grpo.sh: validated with verl 0.9.x, found {found} "
             "(set BIRDRL_VERL_ANY_VERSION=1 to try it anyway)")
PY
fi

# 1. Data: the stage's RL prompts as verl parquet rows (data_source "birdrl").
OUT="$OUT" STAGE="$STAGE" TRAIN_TASKS="$TRAIN_TASKS" VAL_TASKS="$VAL_TASKS" python3 - <<'PY'
import os

from birdrl.tasks.benchmark import open_benchmark
from birdrl.training.verl.export import export_tasks

out, stage = os.environ["OUT"], int(os.environ["STAGE"])
for split, source in (("train", os.environ["TRAIN_TASKS"]), ("test", os.environ["VAL_TASKS"])):
    bench = open_benchmark(source)
    export_tasks(bench.debugging_tasks(), bench.databases, f"{out}/stage{stage}-{split}.parquet",
                 stage=stage, split=split)
PY

# 1b. Before verl loads anything: the birdrl config must know every exported task (each row
#     is scored through it) and its pool must hold what one agent-loop worker may lease.
python3 -m birdrl.training.verl.launch "$BIRDRL_VERL_CONFIG" \
  --train-rows "$OUT/stage$STAGE-train.parquet" --val-rows "$OUT/stage$STAGE-test.parquet" \
  --train-batch "$BATCH" --n "$ROLLOUT_N" --val-n 1 --agent-workers "$AGENT_WORKERS"

# 2. Stage 4 only: verl's tool agent loop with birdrl's tools (rows say agent_name=tool_agent).
#    verl's dataset reads the same tool config (data.tool_config_path follows it) to count
#    the tool schemas into the prompt length when it filters overlong prompts.
TOOLS=()
if [ "$STAGE" = 4 ]; then
  TOOLS=(
    actor_rollout_ref.rollout.multi_turn.enable=True
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/tool_config.yaml"
    actor_rollout_ref.rollout.multi_turn.format=hermes        # the model's tool-call syntax
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=6 # max_tool_calls + 1
    actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1
    actor_rollout_ref.rollout.multi_turn.max_tool_response_length=4000
  )
fi

# 3. Train. The reward is birdrl's evaluator (compute_score): stage 3 scores the answer
#    block, stage 4 reads the submit_solution tool's reward. verl 0.9 reads the custom
#    reward function from reward.custom_reward_function (0.7 read a top-level
#    custom_reward_function, which 0.9 still accepts and ignores). reward_kwargs.config
#    makes the config path explicit for the reward workers; the env var reaches Ray workers
#    only when Ray is started by this driver (ray_kwargs.ray_init.runtime_env.env_vars).
#    Micro-batches: verl refuses to start without them (or use_dynamic_bsz=True); 1 and 2
#    per GPU are conservative for 10k-token sequences of a 7B model: raise them when the
#    memory allows. The ref sizes matter only with use_kl_loss=True. One vLLM engine per GPU
#    (tensor parallel size 1: a 7B model's bf16 weights take 15 GB of its 0.5 share of 80 GB);
#    raise it for larger models. GPUS must be a multiple of it.
python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$OUT/stage$STAGE-train.parquet" \
  data.val_files="$OUT/stage$STAGE-test.parquet" \
  data.return_raw_chat=True \
  data.train_batch_size="$BATCH" \
  data.max_prompt_length=6144 \
  data.max_response_length=4096 \
  data.filter_overlong_prompts=True \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size="$BATCH" \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1 \
  actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2 \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.mode=async \
  actor_rollout_ref.rollout.n="$ROLLOUT_N" \
  actor_rollout_ref.rollout.val_kwargs.n=1 \
  actor_rollout_ref.rollout.agent.num_workers="$AGENT_WORKERS" \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2 \
  "${TOOLS[@]}" \
  reward.custom_reward_function.path=pkg://birdrl.training.verl.reward \
  reward.custom_reward_function.name=compute_score \
  +reward.custom_reward_function.reward_kwargs.config="$BIRDRL_VERL_CONFIG" \
  +ray_kwargs.ray_init.runtime_env.env_vars.BIRDRL_VERL_CONFIG="$BIRDRL_VERL_CONFIG" \
  trainer.n_gpus_per_node="$GPUS" \
  trainer.nnodes=1 \
  trainer.total_epochs=3 \
  trainer.logger='["console"]' \
  trainer.project_name=birdrl \
  trainer.experiment_name="stage$STAGE-grpo" \
  "$@"
