#!/usr/bin/env bash
# Evaluate a run the way the seed does: export each saved checkpoint's LoRA adapter to a PEFT folder,
# then pass@1 (n samples, vLLM + math-verify) on AIME24, AMC23, MATH-500, Minerva and OlympiadBench for
# the base model and every checkpoint; prints the table, writes JSON and an accuracy-over-steps plot.
#   CKPT_DIR=checkpoints/prime_lora/prime_lora_r1_distill_1.5b bash examples/eval_checkpoints.sh
set -euo pipefail
MODEL=${MODEL:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}
EVAL_DIR=${EVAL_DIR:-$HOME/data/open_rs}            # examples/data_preprocess/eval_sets.py --local_dir
OUT=${OUT:-eval_out}
adapters=()
for step in $(ls -d "$CKPT_DIR"/global_step_* | sort -V); do
  python -m verl_prime_lora.tools.export_adapter "$step" --out "$OUT/$(basename "$step")" \
    --lora_dropout 0.05 --base_model "$MODEL"
  adapters+=("$OUT/$(basename "$step")/adapter")
done
python -m verl_prime_lora.tools.eval --base "$MODEL" --adapters "${adapters[@]}" \
  --benchmarks aime24="$EVAL_DIR/aime24.parquet" amc23="$EVAL_DIR/amc23.parquet" \
               math_500="$EVAL_DIR/math_500.parquet" minerva="$EVAL_DIR/minerva.parquet" \
               olympiadbench="$EVAL_DIR/olympiadbench.parquet" \
  --n ${N:-4} --temperature 0.6 --max_tokens 3584 --out "$OUT/results.json" --plot "$OUT/accuracy.png"
