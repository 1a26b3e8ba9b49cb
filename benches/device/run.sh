#!/usr/bin/env bash
# One prepared run on a lent GPU machine (the `device` tool), from what
# benches/device/prepare.sh built here. From this repository's root there:
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash benches/device/run.sh
# with `carry` [".gl", ".devrun"]. Writes under $OUT (at most 8 files come back):
#   log.txt      each step, the adapters, the benches' stderr, the GPU's state at the end
#   tests.txt    the GPU tests (`it gpu::`: every recorded path at the CPU's bits), then the
#                library's unit tests on the host's CPU (its AVX-512 loops, where it has them)
#   suite.json   `posenc bench --suite --json --load=false --repeats 5`
#   torch.jsonl  benches/peers/torch_peer.py, when torch and CUDA are there
#   burn.jsonl   the burn peer, when .devrun/burn.xz was carried
#   pairs.jsonl  interleaved benches, one JSON object per line tagged preset/variant/repeat
#   clocks.csv   the GPU's clocks and power every 100 ms, `##` lines marking the steps
# Set SKIP (words: tests unit suite torch burn pairs diagnostics cpu) to leave steps out,
# PRESETS and VARIANTS to choose the pairs (ENCODE_PRESETS and ENCODE_VARIANTS too, for presets
# whose variants differ): a variant is `new` (this tree), `base` (.devrun/base.xz), `hN`
# (this tree with POSENC_GPU_ROPE_HEADS=N), `uN` (POSENC_GPU_UNITS=N), `counter` (this tree
# with POSENC_GPU_LOOP_BOUNDS=all: wgpu's loop counter in every kernel), `d:NAME` (the
# diagnostics build, .devrun/diag.xz, with POSENC_DIAG=NAME: a kernel with one cost taken
# out, src/shaders/diagnostics.rs) or `diag` (that build with none: the diagnostics'
# control, against `new`); DIAG_PRESETS and DIAG_VARIANTS, MROPE_DIAG_PRESETS and
# MROPE_DIAG_VARIANTS, ENCODE_DIAG_PRESETS and ENCODE_DIAG_VARIANTS choose those pairs, and
# REPEATS the rounds of pairs (default 2).
# benches/peers/compare.py prints the peer tables from $OUT once suite.json is copied to
# posenc.json.
set -u
cd "$(dirname "$0")/../.."
: "${OUT:?set by the device tool}"
SKIP=${SKIP:-}
PRESETS=${PRESETS:-llama3-8b-rope phi-2-rope llama3-8b-rope-decode llama3-8b-step llama2-13b-step llama3-70b-step}
# The H200 (2026-12-04) timed every head group, wgpu's loop counter and two units per
# invocation (docs/performance.md): the blocks form stays, h1 and h2 were nearest.
VARIANTS=${VARIANTS:-new base h1}
ENCODE_PRESETS=${ENCODE_PRESETS:-bert-base gpt2 whisper-small llama3-8b}
ENCODE_VARIANTS=${ENCODE_VARIANTS:-new base}
# What limits the kernels of 2026-12-04 evening (Llama-3-8B's prefill RoPE 10.9 us where
# the copy of its bytes takes 8.6): each cost taken out again on the new kernels.
DIAG_PRESETS=${DIAG_PRESETS:-llama3-8b-rope phi-2-rope llama2-13b-step}
# f16-pack and f16-packonly (2026-12-04, night): f16's rounding by float arithmetic and
# pack2x16float, same bits, 10 % fewer instructions on Phi-2's hot path in RADV's compiler.
# The three together (`d:rope-copy,rope-nocs,rope-nobarrier`): the kernel's loads, stores
# and indexing alone, no arithmetic, cos/sin or barrier wait: what its access pattern (Phi-2:
# 64 of each 160-byte head row) costs against the copy (1.02 of it on lavapipe).
DIAG_VARIANTS=${DIAG_VARIANTS:-new diag d:rope-copy d:rope-trunc d:rope-nobarrier d:rope-noround d:bf16-masked d:f16-short d:f16-pack d:f16-packonly d:rope-copy,rope-nocs,rope-nobarrier}
# Qwen2.5-VL-7B's multimodal RoPE moved fewer bytes than Llama-3-8B's in more time on the
# H200 (11.1 us for 33.5 MB against 10.9 for 41.9; 0.61 of its copy): whether its three
# positions a token and the axis per frequency (rope-nocs takes out the cos/sin, its
# multimodal gathering included) or its block of 256 units (rope-nobarrier) cost it; and
# mrope-quad, the same bits through the one-position path where a unit's four frequencies
# share an axis (RADV's compiler: 3700 cycles of latency on that path against 6700).
MROPE_DIAG_PRESETS=${MROPE_DIAG_PRESETS:-qwen2.5-vl-7b-rope}
MROPE_DIAG_VARIANTS=${MROPE_DIAG_VARIANTS:-new diag d:mrope-quad d:rope-nocs d:rope-copy d:rope-nobarrier d:rope-trunc}
ENCODE_DIAG_PRESETS=${ENCODE_DIAG_PRESETS:-llama3-8b}
ENCODE_DIAG_VARIANTS=${ENCODE_DIAG_VARIANTS:-new diag d:enc-nope}
REPEATS=${REPEATS:-2}
LOG=$OUT/log.txt
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
skip() { [[ " $SKIP " == *" $1 "* ]]; }
say start; nvidia-smi -L >>"$LOG" 2>&1; nproc >>"$LOG"; uname -r >>"$LOG"
# The host's CPU and C library: glibc's memcpy is slow at some page offsets on AMD's Zen 3
# (docs/performance.md, 2026-12-05), which the host results' copy out avoids.
grep -m1 'model name' /proc/cpuinfo >>"$LOG"; ldd --version 2>&1 | head -1 >>"$LOG"
cat .devrun/head.rev .devrun/base.rev .devrun/dirty.txt >>"$LOG" 2>/dev/null
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,clocks_event_reasons.active \
  --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
mark() { echo "## $(date +%T.%N | cut -c1-12) $*" >>"$OUT/clocks.csv"; say "$*"; }
mkdir -p /tmp/b target/release
for v in posenc base diag burn; do
  [ -f .devrun/$v.xz ] && xz -dc .devrun/$v.xz > /tmp/b/$v && chmod +x /tmp/b/$v
done
[ -f .devrun/it.xz ] && xz -dc .devrun/it.xz > target/release/it && chmod +x target/release/it
[ -f .devrun/unit.xz ] && xz -dc .devrun/unit.xz > /tmp/b/unit && chmod +x /tmp/b/unit
cp /tmp/b/posenc target/release/posenc
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

if ! skip tests && [ -x target/release/it ]; then
  mark tests
  timeout 120 target/release/it gpu:: > "$OUT/tests.txt" 2>&1
  say "tests rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | head -20 >>"$LOG"
fi
# The library's unit tests on the host's CPU, appended to tests.txt: where it has AVX-512,
# they hold that set's loops (f16 rows, the encode's sixteen-wide rows) to the baseline.
if ! skip unit && [ -x /tmp/b/unit ]; then
  mark unit
  grep -o -m1 -w 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\n' ' ' >>"$LOG"; echo >>"$LOG"
  timeout 120 /tmp/b/unit >> "$OUT/tests.txt" 2>&1
  say "unit rc=$?"; grep -E "test result|FAILED|panicked" "$OUT/tests.txt" | tail -5 >>"$LOG"
fi
if ! skip suite; then
  mark suite
  timeout 90 $P bench --suite --json --load=false --repeats 5 > "$OUT/suite.json" 2>>"$LOG"
  say "suite rc=$?"
fi
if ! skip torch; then
  mark torch
  PYTHONUNBUFFERED=1 timeout 90 python3 benches/peers/torch_peer.py > "$OUT/torch.jsonl" 2>>"$LOG"
  say "torch rc=$?"
fi
if ! skip burn && [ -x /tmp/b/burn ]; then
  mark burn
  timeout 60 /tmp/b/burn --iters 30 --warmup 5 > "$OUT/burn.jsonl" 2>>"$LOG"; say "burn rc=$?"
fi
variant() { case $1 in
  new) echo /tmp/b/posenc;; base) echo /tmp/b/base;;
  h[0-9]*) echo env POSENC_GPU_ROPE_HEADS=${1#h} /tmp/b/posenc;;
  u[0-9]*) echo env POSENC_GPU_UNITS=${1#u} /tmp/b/posenc;;
  counter) echo env POSENC_GPU_LOOP_BOUNDS=all /tmp/b/posenc;;
  diag) echo env POSENC_DIAG= /tmp/b/diag;;
  d:?*) echo env POSENC_DIAG=${1#d:} /tmp/b/diag;;
  *) return 1;; esac; }
pair() { local tag=$1; shift; echo "### $tag: $*" >>"$LOG"
  timeout 30 "$@" --json --repeats 5 > /tmp/pair.json 2>>"$LOG"; echo "rc=$?" >>"$LOG"
  python3 -c "import json; d=json.load(open('/tmp/pair.json')); d['tag']='$tag'; print(json.dumps(d))" \
    >>"$OUT/pairs.jsonl" 2>>"$LOG"; }
if ! skip pairs; then
  mark pairs
  pairs() { local presets=$1 variants=$2; shift 2
    for m in $presets; do
      for v in $variants; do
        [ "$v" = base ] && [ ! -x /tmp/b/base ] && continue
        [[ "$v" == d:* || "$v" == diag ]] && [ ! -x /tmp/b/diag ] && continue
        if ! cmd=$(variant "$v"); then say "unknown variant $v: skipped"; continue; fi
        pair "$m/$v/$round" $cmd bench --model "$m" --device gpu "$@"
      done
    done; }
  for rep in $(seq "$REPEATS"); do
    round=$rep
    pairs "$PRESETS" "$VARIANTS"
    # The checkpoint's load is a CPU item, and writing the file takes seconds.
    pairs "$ENCODE_PRESETS" "$ENCODE_VARIANTS" --load=false
  done
  if ! skip diagnostics; then
    mark diagnostics
    # Rounds of their own (d1, d2, ...): `diag` (and `new`) are their controls.
    for rep in $(seq "$REPEATS"); do
      round=d$rep
      pairs "$DIAG_PRESETS" "$DIAG_VARIANTS"
      pairs "$MROPE_DIAG_PRESETS" "$MROPE_DIAG_VARIANTS"
      pairs "$ENCODE_DIAG_PRESETS" "$ENCODE_DIAG_VARIANTS" --load=false
    done
  fi
fi
# The CPU loops per instruction set on a lent host with AVX-512 (POSENC_CPU_SIMD), tagged
# cpu-PRESET/SET/cROUND in pairs.jsonl: AVX-512's loops (sin/cos assembled by VPLZCNTD)
# against AVX2's (by VCVTDQ2PS since 2026-12-05) on the table, the encode and RoPE; the
# cost model's AVX-512 rates come from a Zen 5 host (2026-11-26).
if ! skip cpu && grep -q -w avx512bw /proc/cpuinfo; then
  mark cpu
  for rep in 1 2; do
    for set in avx2 widest; do
      pair "cpu-llama3-8b/$set/c$rep" env POSENC_CPU_SIMD=$set $P bench --model llama3-8b --device cpu --load=false
      pair "cpu-llama3-8b-rope/$set/c$rep" env POSENC_CPU_SIMD=$set $P bench --model llama3-8b-rope --device cpu
    done
  done
fi
nvidia-smi -q -d PERFORMANCE,CLOCK >>"$LOG" 2>&1
kill %1 2>/dev/null
say done
