#!/usr/bin/env bash
# Device run C (2026-11-27 night): the GPU tests of the cos/sin cache (rope_pass reads the
# cos/sin of positions below 4096 from a cache built when the pass is prepared), then RoPE
# final (3b5ed79) against cache interleaved at every RoPE and step preset, the suite of the
# cache build, then the PyTorch peer.
set -u
cd "$(dirname "$0")/.."
: "${OUT:?}"
LOG=$OUT/log.txt; DIAG=$OUT/diag.txt; DJ=$OUT/diag.jsonl
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
say start; nvidia-smi -L >>"$LOG" 2>&1; nproc >>"$LOG"; git log --oneline -1 >>"$LOG" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p target/release /tmp/b
for v in final cache; do xz -dc .devrun/posenc-$v.xz > /tmp/b/$v && chmod +x /tmp/b/$v; done
xz -dc .devrun/it.xz > target/release/it && chmod +x target/release/it
cp /tmp/b/cache target/release/posenc
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

mark tests
timeout 100 target/release/it gpu:: > "$OUT/tests.txt" 2>&1
say "tests rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | head -20 >>"$LOG"

mark "rope final/cache"
for rep in 1 2; do
  for m in llama3-8b-rope llama3-8b-rope-decode phi-2-rope; do
    for v in final cache; do d "$m/$v/$rep" /tmp/b/$v bench --model $m --device gpu; done
  done
done
for m in llama3-8b-step llama2-13b-step llama3-70b-step starcoder2-15b-step gemma-7b-step; do
  for v in final cache; do d "$m/$v/1" /tmp/b/$v bench --model $m --device gpu; done
done

mark suite
timeout 90 $P bench --suite --json --load=false --repeats 5 > "$OUT/suite.json" 2>>"$LOG"; say "suite rc=$?"

mark torch
PYTHONUNBUFFERED=1 timeout 75 python3 benches/peers/torch_peer.py > "$OUT/torch.jsonl" 2>>"$LOG"; say "torch rc=$?"
nvidia-smi -q -d PERFORMANCE,CLOCK >>"$LOG" 2>&1
kill %1 2>/dev/null
say done
