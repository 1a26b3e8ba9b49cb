#!/usr/bin/env bash
# Interleaved rounds of `posenc bench --device cpu`, the binary before (OLD) and after (NEW)
# the sin/cos assembly by VCVTDQ2PS on AVX2 (2026-12-05); medians and minima in ms.
set -euo pipefail
OLD=${OLD:?the binary before}; NEW=${NEW:?the binary after}; ROUNDS=${ROUNDS:-3}
cases=(
  "--model llama3-8b --load=false --repeats 10|cpu_table"
  "--repeats 10 --load=false|cpu_table"
  "--model gpt2 --load=false --repeats 10|cpu_table"
  "--model llama3-8b-rope-decode --repeats 1000|cpu_rope"
  "--model llama3-8b-rope --repeats 20|cpu_rope"
)
for r in $(seq 1 "$ROUNDS"); do
  for c in "${cases[@]}"; do
    args=${c%%|*}; item=${c##*|}
    for b in old new; do
      bin=$OLD; [ $b = new ] && bin=$NEW
      line=$("$bin" bench $args --device cpu 2>&1 | grep "^$item " | awk '{printf "%s %s/%s", $1, $2, $3}')
      echo "round $r [$args] $b $line"
    done
  done
done
