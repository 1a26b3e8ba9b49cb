#!/usr/bin/env bash
# Device run 2 (2026-11-28): the code committed (`final`: alibi_flat on GPUs, the encode as
# main had it): the GPU tests, `posenc bench --suite`, the PyTorch and burn peers; then
# diagnostics, interleaved, on RoPE (units per invocation through POSENC_GPU_UNITS, and a
# build `diag` whose RoPE kernel reads every cos/sin from the cache, POSENC_DIAG_RCACHE,
# so the exact phase's code is not compiled in) and on f16 (`diag` with POSENC_DIAG_F16FAST:
# the f16 conversions' short path taken always, their general form not compiled in).
set -u
cd "$(dirname "$0")/.."
: "${OUT:?}"
LOG=$OUT/log.txt; DIAG=$LOG; DJ=$OUT/diag.jsonl
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
say start; nvidia-smi -L >>"$LOG" 2>&1; nproc >>"$LOG"; uname -r >>"$LOG"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p target/release /tmp/b
for v in final diag; do xz -dc .devrun/posenc-$v.xz > /tmp/b/$v && chmod +x /tmp/b/$v; done
xz -dc .devrun/it.xz > target/release/it && chmod +x target/release/it
xz -dc .devrun/burn.xz > /tmp/b/burn && chmod +x /tmp/b/burn
cp /tmp/b/final target/release/posenc
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
d() { local tag=$1; shift; echo "### $tag: $*" >>"$DIAG";
  timeout 30 "$@" --json --repeats 5 > /tmp/d.json 2>>"$DIAG"; echo "rc=$?" >>"$DIAG";
  python3 -c "import json,sys; d=json.load(open('/tmp/d.json')); d['tag']='$tag'; print(json.dumps(d))" >>"$DJ" 2>>"$DIAG"; }
v() { case $1 in
  u2) echo env POSENC_GPU_UNITS=2 /tmp/b/final;; u4) echo env POSENC_GPU_UNITS=4 /tmp/b/final;;
  rcache) echo env POSENC_DIAG_RCACHE=1 /tmp/b/diag;; f16fast) echo env POSENC_DIAG_F16FAST=1 /tmp/b/diag;;
  *) echo /tmp/b/$1;; esac; }

mark tests
timeout 100 target/release/it gpu:: > "$OUT/tests.txt" 2>&1
say "tests rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | head -20 >>"$LOG"

mark suite
timeout 60 $P bench --suite --json --load=false --repeats 5 > "$OUT/suite.json" 2>>"$LOG"; say "suite rc=$?"

mark torch
PYTHONUNBUFFERED=1 timeout 80 python3 benches/peers/torch_peer.py > "$OUT/torch.jsonl" 2>>"$LOG"; say "torch rc=$?"

mark burn
timeout 60 /tmp/b/burn --iters 30 --warmup 5 > "$OUT/burn.jsonl" 2>>"$LOG"; say "burn rc=$?"

mark "rope diags"
for rep in 1 2; do
  for m in llama3-8b-rope phi-2-rope llama3-8b-rope-decode llama3-8b-step; do
    for b in final u2 u4 rcache; do d "$m/$b/$rep" $(v $b) bench --model $m --device gpu; done
  done
  for b in final f16fast; do d "llama2-13b-step/$b/$rep" $(v $b) bench --model llama2-13b-step --device gpu; done
  d "llama2-13b-step-bf16/final/$rep" /tmp/b/final bench --model llama2-13b-step --dtype bf16 --device gpu
done
nvidia-smi -q -d PERFORMANCE,CLOCK >>"$LOG" 2>&1
kill %1 2>/dev/null
say done
