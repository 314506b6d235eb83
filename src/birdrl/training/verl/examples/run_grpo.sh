#!/usr/bin/env bash
# A sketch of GRPO on verl with birdrl's data, reward and tools. NOT RUN HERE: birdrl's
# CI has no verl, Ray, vLLM or GPUs. The option names follow verl's trainer config
# (verl/trainer/config/ppo_trainer.yaml, rollout/rollout.yaml) at verl 0.7; check them
# against the verl you install. Usage: STAGE=4 bash run_grpo.sh [extra hydra overrides]
set -euo pipefail

STAGE=${STAGE:-4}                      # 3: single turn (<answer> block), 4: tools
OUT=${OUT:-$HOME/data/birdrl-verl}
MODEL=${MODEL:-Qwen/Qwen2.5-Coder-7B-Instruct}
HERE=$(cd "$(dirname "$0")" && pwd)
# The birdrl config every verl process reads (tasks, databases, evaluator, replica pool).
# Copy birdrl_verl.json, edit it, and point tool_config.yaml's birdrl_config at it too.
export BIRDRL_VERL_CONFIG=${BIRDRL_VERL_CONFIG:-$HERE/birdrl_verl.json}

# 1. Data: the stage's RL prompts as verl parquet rows (data_source "birdrl").
python - <<PY
from birdrl.tasks.benchmark import open_benchmark
from birdrl.training.verl.export import export_tasks
for split in ("train", "test"):
    bench = open_benchmark(f"bundled:{split}")
    export_tasks(bench.debugging_tasks(), bench.databases, "$OUT/stage$STAGE-$split.parquet",
                 stage=$STAGE, split=split)
PY

# 2. Stage 4 only: verl's tool agent loop with birdrl's tools (rows say agent_name=tool_agent).
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
#    block, stage 4 reads the submit_solution tool's reward. reward_kwargs.config makes the
#    config path explicit for the reward workers; the env var reaches Ray workers only when
#    Ray is started by this driver (ray_kwargs.ray_init.runtime_env.env_vars otherwise).
python3 -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files="$OUT/stage$STAGE-train.parquet" \
  data.val_files="$OUT/stage$STAGE-test.parquet" \
  data.return_raw_chat=True \
  data.train_batch_size=32 \
  data.max_prompt_length=6144 \
  data.max_response_length=4096 \
  data.filter_overlong_prompts=True \
  actor_rollout_ref.model.path="$MODEL" \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.ppo_mini_batch_size=32 \
  actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.rollout.name=vllm \
  actor_rollout_ref.rollout.mode=async \
  actor_rollout_ref.rollout.n=8 \
  "${TOOLS[@]}" \
  reward_model.use_reward_loop=True \
  custom_reward_function.path=pkg://birdrl.training.verl.reward \
  custom_reward_function.name=compute_score \
  +custom_reward_function.reward_kwargs.config="$BIRDRL_VERL_CONFIG" \
  +ray_kwargs.ray_init.runtime_env.env_vars.BIRDRL_VERL_CONFIG="$BIRDRL_VERL_CONFIG" \
  trainer.n_gpus_per_node=8 \
  trainer.nnodes=1 \
  trainer.total_epochs=3 \
  trainer.logger='["console"]' \
  trainer.project_name=birdrl \
  trainer.experiment_name="stage$STAGE-grpo" \
  "$@"
