#!/usr/bin/env bash
# posenc beside its peers on one machine: `posenc bench --suite --json`, PyTorch on CUDA
# (torch_peer.py: eager and torch.compile, device time from CUDA graphs) and burn's wgpu
# backend (burn/: whole calls), each writing its own file under OUT_DIR.
#
#   benches/peers/run.sh OUT_DIR            # builds what is missing, then runs all three
#
# Needs a Rust toolchain (posenc and the burn peer are built here, in release), and for the
# PyTorch peer a python3 with torch and a CUDA GPU (skipped, saying so, without them). Set
# POSENC and BURN_PEER to prebuilt binaries to skip the builds. The GPU is whatever wgpu
# picks (WGPU_BACKEND=vulkan to be sure both Rust programs use the same one).
set -u
out=${1:?usage: benches/peers/run.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
posenc=${POSENC:-}
if [ -z "$posenc" ]; then
    (cd "$root" && cargo build --release --bin posenc) || exit 1
    posenc=$root/target/release/posenc
fi
burn=${BURN_PEER:-}
if [ -z "$burn" ]; then
    target=${CARGO_TARGET_DIR:-$root/target/burn-peer}
    (cd "$root/benches/peers/burn" && CARGO_TARGET_DIR=$target cargo build --release) || exit 1
    burn=$target/release/posenc-burn-peer
fi

echo "== posenc bench --suite --json -> $out/posenc.json"
"$posenc" bench --suite --json --load=false > "$out/posenc.json" || echo "posenc: failed ($?)"

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "== torch_peer.py -> $out/torch.jsonl"
    python3 "$root/benches/peers/torch_peer.py" > "$out/torch.jsonl" || echo "torch: failed ($?)"
else
    echo "== torch_peer.py skipped: no python3 with torch and a CUDA device"
fi

echo "== posenc-burn-peer -> $out/burn.jsonl"
"$burn" > "$out/burn.jsonl" || echo "burn: failed ($?)"

echo "== summary"
python3 "$root/benches/peers/compare.py" "$out" || true
