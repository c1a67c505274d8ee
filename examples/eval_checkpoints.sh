#!/usr/bin/env bash
# pass@1 of the base model and of the saved checkpoints of one run, with the sampling of the seed card's own
# evaluation (open-rs2-PRIME scripts/eval/eval_prime.py) by default: AIME24, AIME25, AMC23 and MATH-500, one
# sample per problem, temperature 0.6, top_p 0.95, at most 32768 new tokens in a 32768-token vLLM context, the
# card's user-only prompt (as examples/data_preprocess/eval_sets.py writes it by default). Answers are judged by the
# training reward's verifier, not the card's own check; docs/evaluation.md lists every difference.
# Steps: each checkpoint CKPT_DIR/global_step_N is exported to a PEFT adapter (tools.export_adapter), then one
# `python -m verl_prime_lora.tools.eval` run scores the base model and all adapters; it prints the table and
# writes OUT/results.json (scores, timings, every generation) and OUT/accuracy.png (accuracy over steps).
#   CKPT_DIR=checkpoints/prime_lora/prime_lora_r1_distill_1.5b bash examples/eval_checkpoints.sh [eval options...]
# Environment (default -> effect):
#   MODEL (deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B)  base model of the run
#   PYTHON (python)        the interpreter that runs export_adapter and tools.eval (as the launch scripts')
#   EVAL_DIR ($HOME/data/open_rs)  folder of eval_sets.py's parquets;  OUT (eval_out)  output folder
#   EXTRAS ("")            more benchmarks after the card's four, e.g. EXTRAS="minerva olympiadbench" (Tina's extras)
#   N (1)                  samples per problem;  TEMPERATURE (0.6);  TOP_P (0.95)
#   MAX_TOKENS (32768)     max new tokens per sample
#   MAX_MODEL_LEN (unset)  vLLM's prompt + completion limit; unset: the tool's default, max(32768, MAX_TOKENS)
#   STEPS (unset)          only these checkpoints, e.g. STEPS="150 200" (the card's script: eval_prime.py:99);
#                          unset: every CKPT_DIR/global_step_N, in step order
# Options after the script name go to tools.eval last (e.g. --seed 1, --tensor_parallel_size 2, --max_samples 5).
set -euo pipefail
: "${CKPT_DIR:?set CKPT_DIR to the checkpoint folder of the run (the one holding global_step_N)}"
MODEL=${MODEL:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}
PYTHON=${PYTHON:-python}
EVAL_DIR=${EVAL_DIR:-$HOME/data/open_rs}            # examples/data_preprocess/eval_sets.py --local_dir
OUT=${OUT:-eval_out}
BENCHMARKS=(aime24 aime25 amc23 math_500)           # the card's four (eval_prime.py:16-21)
read -r -a extras <<< "${EXTRAS:-}"
benchmark_args=()
for name in "${BENCHMARKS[@]}" "${extras[@]}"; do
  benchmark_args+=("$name=$EVAL_DIR/$name.parquet")
done
length_args=()
if [[ -n "${MAX_MODEL_LEN:-}" ]]; then
  length_args=(--max_model_len "$MAX_MODEL_LEN")
fi

if [[ -n "${STEPS:-}" ]]; then
  read -r -a wanted <<< "$STEPS"
  steps=()
  for n in "${wanted[@]}"; do
    steps+=("$CKPT_DIR/global_step_$n")
  done
else
  mapfile -t steps < <(printf '%s\n' "$CKPT_DIR"/global_step_* | sort -V)
fi
if [[ ${#steps[@]} -eq 0 ]]; then
  echo "eval_checkpoints.sh: STEPS names no checkpoint" >&2
  exit 1
fi
for step in "${steps[@]}"; do
  if [[ ! -d "$step" ]]; then
    echo "eval_checkpoints.sh: no global_step_N folder $step" >&2
    exit 1
  fi
done
adapters=()
for step in "${steps[@]}"; do
  "$PYTHON" -m verl_prime_lora.tools.export_adapter "$step" --out "$OUT/$(basename "$step")" \
    --lora_dropout 0.05 --base_model "$MODEL"
  adapters+=("$OUT/$(basename "$step")/adapter")
done
"$PYTHON" -m verl_prime_lora.tools.eval --base "$MODEL" --adapters "${adapters[@]}" \
  --benchmarks "${benchmark_args[@]}" \
  --n "${N:-1}" --temperature "${TEMPERATURE:-0.6}" --top_p "${TOP_P:-0.95}" --max_tokens "${MAX_TOKENS:-32768}" \
  "${length_args[@]}" --out "$OUT/results.json" --plot "$OUT/accuracy.png" "$@"
