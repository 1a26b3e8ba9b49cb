#!/usr/bin/env bash
# Device run 3 (2026-11-28): `f16v`, the f16 conversions of the vec4 kernels without their
# short path's branch (convert.wgsl's branch-free forms on the four lanes at once): the GPU
# tests of that build, then `final` (run 2's build) and `f16v` interleaved at the f16
# presets and one bf16 control, then the suite of `f16v`.
set -u
cd "$(dirname "$0")/.."
: "${OUT:?}"
LOG=$OUT/log.txt; DIAG=$LOG; DJ=$OUT/diag.jsonl
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
say start; nvidia-smi -L >>"$LOG" 2>&1; nproc >>"$LOG"; uname -r >>"$LOG"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p target/release /tmp/b
for v in final f16v; do xz -dc .devrun/posenc-$v.xz > /tmp/b/$v && chmod +x /tmp/b/$v; done
xz -dc .devrun/it.xz > target/release/it && chmod +x target/release/it
cp /tmp/b/f16v target/release/posenc
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
timeout 90 target/release/it gpu:: > "$OUT/tests.txt" 2>&1
say "tests rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | head -20 >>"$LOG"

mark "f16 pairs"
for rep in 1 2; do
  for b in final f16v; do
    d "llama2-13b-step/$b/$rep" /tmp/b/$b bench --model llama2-13b-step --device gpu
    d "phi-2-rope/$b/$rep" /tmp/b/$b bench --model phi-2-rope --device gpu
    d "llama3-8b-rope-f16/$b/$rep" /tmp/b/$b bench --model llama3-8b-rope --dtype f16 --device gpu
    d "llama2-13b-step-bf16/$b/$rep" /tmp/b/$b bench --model llama2-13b-step --dtype bf16 --device gpu
  done
done

mark suite
timeout 50 $P bench --suite --json --load=false --repeats 5 > "$OUT/suite.json" 2>>"$LOG"; say "suite rc=$?"
kill %1 2>/dev/null
say done
