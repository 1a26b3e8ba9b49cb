#!/usr/bin/env bash
# Device run (2026-11-28): the GPU tests of the flat encode grid, then the recorded encode's
# grids interleaved (`base`: main's 4492ed9, a workgroup per token block; `flat`: full
# workgroups over the rows laid end to end, one unit per invocation; `flat2`: the same
# binary with POSENC_GPU_UNITS=2, two units per invocation), the step presets and
# Llama-2-13B's step in f16 and bf16, the suite of both binaries, then the PyTorch and burn
# peers. `flat` also writes ALiBi's aligned rows with alibi_flat (one vec4 per invocation,
# full workgroups), at every row count; `base` with alibi_x4 from 1024 rows, else alibi.
set -u
cd "$(dirname "$0")/.."
: "${OUT:?}"
LOG=$OUT/log.txt; DIAG=$LOG; DJ=$OUT/diag.jsonl
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
say start; nvidia-smi -L >>"$LOG" 2>&1; nproc >>"$LOG"; uname -r >>"$LOG"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p target/release /tmp/b
for v in base flat; do xz -dc .devrun/posenc-$v.xz > /tmp/b/$v && chmod +x /tmp/b/$v; done
xz -dc .devrun/it.xz > target/release/it && chmod +x target/release/it
if [ -f .devrun/burn.xz ]; then xz -dc .devrun/burn.xz > /tmp/b/burn && chmod +x /tmp/b/burn; fi
cp /tmp/b/flat target/release/posenc
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
v() { case $1 in flat2) echo env POSENC_GPU_UNITS=2 /tmp/b/flat;; *) echo /tmp/b/$1;; esac; }

mark tests
timeout 110 target/release/it gpu:: > "$OUT/tests.txt" 2>&1
say "tests rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | head -20 >>"$LOG"

mark "encode grids"
for rep in 1 2; do
  for m in bert-base gpt2 whisper-small llama3-8b llama3-8b-decode mistral-7b-decode; do
    for b in base flat flat2; do d "$m/$b/$rep" $(v $b) bench --model $m --device gpu --load=false; done
  done
done
mark alibi
for rep in 1 2; do
  for m in bloom-7b1-alibi bloom-7b1-alibi-decode; do
    for b in base flat; do d "$m/$b/$rep" $(v $b) bench --model $m --device gpu; done
  done
done
mark steps
for m in llama3-8b-step llama2-13b-step gemma-7b-step llama3-70b-step; do
  for b in base flat; do d "$m/$b/1" $(v $b) bench --model $m --device gpu; done
done
for b in base flat base flat; do d "llama2-13b-step-bf16/$b/1" $(v $b) bench --model llama2-13b-step --dtype bf16 --device gpu; done

mark suite
timeout 90 /tmp/b/flat bench --suite --json --load=false --repeats 5 > "$OUT/suite.json" 2>>"$LOG"; say "suite rc=$?"
timeout 90 /tmp/b/base bench --suite --json --load=false --repeats 5 > "$OUT/suite-base.json" 2>>"$LOG"; say "suite base rc=$?"

mark torch
PYTHONUNBUFFERED=1 timeout 80 python3 benches/peers/torch_peer.py > "$OUT/torch.jsonl" 2>>"$LOG"; say "torch rc=$?"
if [ -x /tmp/b/burn ]; then
  mark burn
  timeout 90 /tmp/b/burn > "$OUT/burn.jsonl" 2>>"$LOG"; say "burn rc=$?"
fi
nvidia-smi -q -d PERFORMANCE,CLOCK >>"$LOG" 2>&1
kill %1 2>/dev/null
say done
