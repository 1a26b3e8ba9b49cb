#!/usr/bin/env bash
# Interleaved rounds of `posenc bench --device cpu` at the RoPE presets, the binary before
# (OLD) and after (NEW) the CPU RoPE loops of 2026-12-05; medians and minima in ms.
set -euo pipefail
OLD=${OLD:?the binary before}; NEW=${NEW:?the binary after}; ROUNDS=${ROUNDS:-3}
cases=(
  "llama3-8b-rope-decode bf16 1000" "llama3-8b-rope-decode f16 1000" "llama3-8b-rope-decode f32 1000"
  "llama3-8b-rope bf16 20" "llama3-8b-rope f16 20" "llama3-8b-rope f32 20"
  "phi-2-rope f16 30" "qwen2.5-vl-7b-rope bf16 20"
)
for r in $(seq 1 "$ROUNDS"); do
  for c in "${cases[@]}"; do
    set -- $c
    for b in old new; do
      bin=$OLD; [ $b = new ] && bin=$NEW
      line=$("$bin" bench --model "$1" --dtype "$2" --repeats "$3" --device cpu 2>&1 | grep "cpu_rope \|cpu_copy_ceiling " | awk '{printf "%s %s/%s  ", $1, $2, $3}')
      echo "round $r $1 $2 $b $line"
    done
  done
done
