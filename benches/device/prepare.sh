#!/usr/bin/env bash
# Builds here, for a run on a lent GPU machine (the `device` tool), everything
# benches/device/run.sh runs there, compressed into .devrun/ (ignored by git; name it and
# .gl in the call's `carry`):
#   posenc.xz    this tree's release binary
#   it.xz        the integration tests (`it gpu::` runs the GPU tests there)
#   unit.xz      the library's unit tests (the CPU loops of every instruction set the host has)
#   base.xz      the binary of BASE (a commit: the code before the changes to measure) for
#                interleaved pairs, built in a worktree of its own; BASE=none skips it
#   diag.xz      this tree built with the `diagnostics` feature (src/shaders/diagnostics.rs):
#                run.sh's `d:NAME` variants run it with POSENC_DIAG=NAME
#   burn.xz      the burn peer (benches/peers/burn), when BURN_PEER names a built binary
#                (its build takes 22 - 40 min on 2 cores: see benches/peers/burn/README.md)
# The machine there has no Rust toolchain worth building with and no network, and each
# minute of it counts; so nothing is built there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .devrun
grep -qx '.devrun' .git/info/exclude 2>/dev/null || echo .devrun >> .git/info/exclude
base=${BASE:?set BASE to the commit to compare against (BASE=none for no pairs against one)}
cargo build --release --bin posenc
it=$(cargo test --release --no-run --test it --message-format=json \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it":
        print(m["executable"])')
# The library's unit tests too: on a host with AVX-512 (the lent machines' CPUs) they hold
# the AVX-512 loops to the baseline's bits, which no development machine of 2026-12-04/05 had.
unit=$(cargo test --release --no-run --lib --message-format=json \
  | python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["executable"])')
xz -T0 -3 -c target/release/posenc > .devrun/posenc.xz
xz -T0 -3 -c "$it" > .devrun/it.xz
xz -T0 -3 -c "$unit" > .devrun/unit.xz
# The same target directory: cargo keeps both feature sets' builds, so switching back
# costs nothing; the last build puts the plain binary back in target/release.
cargo build --release --bin posenc --features diagnostics
xz -T0 -3 -c target/release/posenc > .devrun/diag.xz
cargo build --release --bin posenc
if [ "$base" != none ]; then
  dir=${BASE_DIR:-/tmp/posenc-base}
  rev=$(git rev-parse "$base")
  # A worktree this script made before is replaced; anything else there stops it.
  git worktree remove --force "$dir" 2>/dev/null || true
  git worktree prune
  git worktree add -f --detach "$dir" "$rev" >/dev/null
  (cd "$dir" && CARGO_TARGET_DIR=${BASE_TARGET:-/tmp/posenc-base-target} cargo build --release --bin posenc)
  xz -T0 -3 -c "${BASE_TARGET:-/tmp/posenc-base-target}/release/posenc" > .devrun/base.xz
  echo "$rev" > .devrun/base.rev
else
  # A base binary left from an earlier preparation would be carried and timed as `base`.
  rm -f .devrun/base.xz .devrun/base.rev
fi
if [ -n "${BURN_PEER:-}" ]; then
  strip -o /tmp/posenc-burn-peer.stripped "$BURN_PEER"
  xz -T0 -6 -c /tmp/posenc-burn-peer.stripped > .devrun/burn.xz
fi
git rev-parse HEAD > .devrun/head.rev
git status --short > .devrun/dirty.txt
du -ch .devrun/* | tail -1
