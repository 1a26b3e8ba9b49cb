#!/usr/bin/env bash
# Interleaved before/after runs on lavapipe: OLD (8c69b59) and NEW (this commit's parent
# chain) posenc binaries, two rounds each. Usage: OLD=... NEW=... bash run.sh
set -u
export XDG_RUNTIME_DIR=$(mktemp -d) WGPU_BACKEND=vulkan
for round in 1 2; do
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    for m in bloom-7b1-alibi bloom-7b1-alibi-decode; do
      $bin bench --model $m --repeats 5 --json > $m.$which.$round.json 2>>log.txt
    done
    $bin bench --batch 1 --len 8192 --dim 4096 --vocab 32000 --dtype bf16 --device gpu \
      --repeats 3 --json > prefill-8192x4096.$which.$round.json 2>>log.txt
  done
done
