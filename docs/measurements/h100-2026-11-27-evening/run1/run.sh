#!/usr/bin/env bash
# One device run (2026-11-27 evening, run A): the suite (bounded passes, RoPE/ALiBi/f16
# kernel changes and polled waits, none yet measured on a GPU), the PyTorch peer, probes,
# polled-vs-sleeping waits at the decode presets, units per invocation for RoPE and the
# f16 step, then the GPU tests. Results in $OUT (at most 8 files): log.txt, suite.json,
# torch.jsonl, tests.txt, clocks.csv, diag.txt, diag.jsonl.
set -u
cd "$(dirname "$0")/.."
: "${OUT:?}"
LOG=$OUT/log.txt; DIAG=$OUT/diag.txt; DJ=$OUT/diag.jsonl
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
say start; nvidia-smi -L >>"$LOG" 2>&1; nproc >>"$LOG"; git log --oneline -1 >>"$LOG" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p target/release
for f in posenc it readback_probe call_probe; do xz -dc .devrun/$f.xz > target/release/$f && chmod +x target/release/$f; done
mkdir -p /work && ln -sfn "$PWD" /work/main
P=target/release/posenc
export XDG_RUNTIME_DIR=$(mktemp -d)
if ! $P devices 2>/dev/null | grep -q Vulkan; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  say "VK_DRIVER_FILES set"
fi
$P devices >>"$LOG" 2>&1
if ! $P devices 2>/dev/null | grep -q Vulkan; then say "no Vulkan adapter"; exit 1; fi
export WGPU_BACKEND=vulkan
mark() { echo "## $(date +%T.%N | cut -c1-12) $*" >>"$OUT/clocks.csv"; say "$*"; }

mark suite
timeout 240 $P bench --suite --json --load=false --repeats 5 > "$OUT/suite.json" 2>>"$LOG"; say "suite rc=$?"

mark torch
PYTHONUNBUFFERED=1 timeout 150 python3 benches/peers/torch_peer.py > "$OUT/torch.jsonl" 2>>"$LOG"; say "torch rc=$?"

d() { local tag=$1; shift; mark "diag $tag"; echo "### $tag: $*" >>"$DIAG";
  timeout 60 "$@" --json > /tmp/d.json 2>>"$DIAG"; echo "rc=$?" >>"$DIAG";
  python3 -c "import json,sys; d=json.load(open('/tmp/d.json')); d['tag']='$tag'; print(json.dumps(d))" >>"$DJ" 2>>"$DIAG"; }
mark probe
timeout 60 target/release/readback_probe 12 25 32 64 >>"$DJ" 2>>"$DIAG"; say "readback_probe rc=$?"
for n in 8 1; do timeout 60 target/release/call_probe $n >>"$DJ" 2>>"$DIAG"; say "call_probe $n rc=$?"; done
B="$P bench --device gpu --load=false --repeats 5"
O="$P bench --device gpu --repeats 5"
# Polled against sleeping waits, interleaved.
for r in 1 2; do for m in llama3-8b-decode mistral-7b-decode bert-base; do
  d $m-spin0-$r env POSENC_GPU_SPIN_US=0 $B --model $m
  d $m-spin-$r $B --model $m
done; done
# Units per invocation: llama3-8b RoPE, the f16 step and its bf16 form.
for u in 1 2 4; do
  d rope-u$u env POSENC_GPU_UNITS=$u $O --model llama3-8b-rope
  d l13-u$u env POSENC_GPU_UNITS=$u $O --model llama2-13b-step
done
d l13-bf16 $O --model llama2-13b-step --dtype bf16
d l8-step-f16 $O --model llama3-8b-step --dtype f16

mark tests
timeout 150 target/release/it gpu:: > "$OUT/tests.txt" 2>&1
say "tests rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | head -20 >>"$LOG"
nvidia-smi -q -d PERFORMANCE,CLOCK >>"$LOG" 2>&1
kill %1 2>/dev/null
say done
