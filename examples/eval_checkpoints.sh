#!/usr/bin/env bash
# pass@1 of the base model and of the saved checkpoints of one run, with the sampling of the seed card's own
# evaluation (open-rs2-PRIME scripts/eval/eval_prime.py) by default: AIME24, AIME25, AMC23 and MATH-500, one
# sample per problem, temperature 0.6, top_p 0.95, at most 32768 new tokens in a 32768-token vLLM context, the
# card's user-only prompt (as examples/data_preprocess/eval_sets.py writes it by default). Answers are judged by the
# training reward's verifier, not the card's own check; docs/evaluation.md lists every difference.
# Steps: each step's adapter is ADAPTERS_DIR/global_step_N/adapter; one missing or unfinished (no
# adapter_model.safetensors) is exported from CKPT_DIR/global_step_N (tools.export_adapter), a finished one is used
# as it is. Then one `python -m verl_prime_lora.tools.eval` run scores the base model and all adapters; it prints the
# table and writes OUT/results.json (scores, timings, every generation; rewritten after each model) and
# OUT/accuracy.png (accuracy over steps).
#   CKPT_DIR=checkpoints/prime_lora/prime_lora_r1_distill_1.5b bash examples/eval_checkpoints.sh [eval options...]
#   ADAPTERS_DIR=adapters STEPS="50 100" bash examples/eval_checkpoints.sh    # adapters exported already
# Run again after a crash or Ctrl-C: finished exports are skipped, and tools.eval continues OUT/results.json
# (--resume: the models in it are not scored again; it refuses a file scored with other settings). OUT and
# ADAPTERS_DIR belong to one training run: score another run (a new one in the same CKPT_DIR too) into a new OUT.
# Two GPUs: two runs at once, each with its own CUDA_VISIBLE_DEVICES, OUT and STEPS (docs/evaluation.md).
# Environment (default -> effect):
#   CKPT_DIR (unset)       the run's checkpoint folder (the one holding global_step_N); needed for steps whose adapter
#                          is not in ADAPTERS_DIR
#   ADAPTERS_DIR (OUT)     folder of exported adapters, ADAPTERS_DIR/global_step_N/adapter (as docs/operations.md's
#                          export loop writes them); exports go there too
#   STEPS (unset)          only these steps, e.g. STEPS="150 200" (the card's script: eval_prime.py:99); unset: every
#                          CKPT_DIR/global_step_N and every finished ADAPTERS_DIR/global_step_N/adapter, in step order
#   OUT (eval_out)         output folder (made if missing)
#   RESUME (1)             continue OUT/results.json when it exists; RESUME=0: score every model again (replaces it)
#   MODEL (deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B)  base model of the run
#   PYTHON (python)        the interpreter that runs export_adapter and tools.eval (as the launch scripts')
#   EVAL_DIR ($HOME/data/open_rs)  folder of eval_sets.py's parquets
#   EXTRAS ("")            more benchmarks after the card's four, e.g. EXTRAS="minerva olympiadbench" (Tina's extras)
#   N (1)                  samples per problem;  TEMPERATURE (0.6);  TOP_P (0.95)
#   MAX_TOKENS (32768)     max new tokens per sample
#   MAX_MODEL_LEN (unset)  vLLM's prompt + completion limit; unset: the tool's default, max(32768, MAX_TOKENS)
# Options after the script name go to tools.eval last (e.g. --seed 1, --tensor_parallel_size 2, --max_samples 5).
set -euo pipefail
if [[ -z "${CKPT_DIR:-}" && -z "${ADAPTERS_DIR:-}" ]]; then
  echo "eval_checkpoints.sh: set CKPT_DIR to the checkpoint folder of the run (the one holding global_step_N)," \
    "or ADAPTERS_DIR to a folder of exported adapters (global_step_N/adapter)" >&2
  exit 1
fi
CKPT_DIR=${CKPT_DIR:-}
MODEL=${MODEL:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}
PYTHON=${PYTHON:-python}
EVAL_DIR=${EVAL_DIR:-$HOME/data/open_rs}            # examples/data_preprocess/eval_sets.py --local_dir
OUT=${OUT:-eval_out}
ADAPTERS_DIR=${ADAPTERS_DIR:-$OUT}
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

# export_adapter writes adapter_model.safetensors last, whole (a rename): with it, the export is finished
finished() { [[ -f "$1/adapter_config.json" && -f "$1/adapter_model.safetensors" ]]; }

if [[ -n "${STEPS:-}" ]]; then
  read -r -a wanted <<< "$STEPS"
  names=()
  for n in "${wanted[@]}"; do
    names+=("global_step_$n")
  done
else
  found=()
  shopt -s nullglob
  if [[ -n "$CKPT_DIR" ]]; then
    for step in "$CKPT_DIR"/global_step_*/; do
      found+=("$(basename "$step")")
    done
  fi
  for adapter in "$ADAPTERS_DIR"/global_step_*/adapter; do
    if finished "$adapter"; then
      found+=("$(basename "$(dirname "$adapter")")")
    fi
  done
  shopt -u nullglob
  names=()
  if [[ ${#found[@]} -gt 0 ]]; then
    mapfile -t names < <(printf '%s\n' "${found[@]}" | sort -uV)
  fi
fi
if [[ ${#names[@]} -eq 0 ]]; then
  echo "eval_checkpoints.sh: no step to score: no global_step_N folder in CKPT_DIR=${CKPT_DIR:-(unset)} and no" \
    "finished global_step_N/adapter in ADAPTERS_DIR=$ADAPTERS_DIR" >&2
  exit 1
fi
adapters=()
exports=()
for name in "${names[@]}"; do
  adapter="$ADAPTERS_DIR/$name/adapter"
  if ! finished "$adapter"; then
    if [[ -z "$CKPT_DIR" ]]; then
      echo "eval_checkpoints.sh: $name: no finished adapter in $adapter, and CKPT_DIR (the checkpoint folder" \
        "to export it from) is unset" >&2
      exit 1
    elif [[ ! -d "$CKPT_DIR/$name" ]]; then
      echo "eval_checkpoints.sh: $name: no finished adapter in $adapter, and no global_step_N folder" \
        "$CKPT_DIR/$name to export it from" >&2
      exit 1
    fi
    exports+=("$name")
  fi
  adapters+=("$adapter")
done
for name in "${exports[@]}"; do
  "$PYTHON" -m verl_prime_lora.tools.export_adapter "$CKPT_DIR/$name" --out "$ADAPTERS_DIR/$name" \
    --lora_dropout 0.05 --base_model "$MODEL"
done
if [[ ${#exports[@]} -lt ${#names[@]} ]]; then
  echo "eval_checkpoints.sh: $(( ${#names[@]} - ${#exports[@]} )) of ${#names[@]} adapters were exported already" \
    "(in $ADAPTERS_DIR)"
fi
resume_args=()
if [[ "${RESUME:-1}" != 0 && -f "$OUT/results.json" ]]; then
  resume_args=(--resume)
fi
"$PYTHON" -m verl_prime_lora.tools.eval --base "$MODEL" --adapters "${adapters[@]}" \
  --benchmarks "${benchmark_args[@]}" \
  --n "${N:-1}" --temperature "${TEMPERATURE:-0.6}" --top_p "${TOP_P:-0.95}" --max_tokens "${MAX_TOKENS:-32768}" \
  "${length_args[@]}" --out "$OUT/results.json" --plot "$OUT/accuracy.png" "${resume_args[@]}" "$@"
