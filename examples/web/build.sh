#!/usr/bin/env bash
# Builds the page: the crate for wasm32-unknown-unknown (release), then wasm-bindgen's JS
# glue and wasm into examples/web/pkg. Needs the wasm32 target
# (`rustup target add wasm32-unknown-unknown`) and the wasm-bindgen CLI of exactly the
# version the lockfile pins (`cargo install wasm-bindgen-cli --version 0.2.130 --locked`);
# WASM_BINDGEN names another binary than the one on PATH. CARGO_TARGET_DIR defaults to the
# repository's target/, shared with posenc's own builds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
want="0.2.130"
bindgen="${WASM_BINDGEN:-wasm-bindgen}"

if ! command -v "$bindgen" >/dev/null 2>&1; then
    echo "build.sh: no wasm-bindgen CLI ('$bindgen' is not on PATH)." >&2
    echo "  install it: cargo install wasm-bindgen-cli --version $want --locked" >&2
    echo "  or point WASM_BINDGEN at one" >&2
    exit 1
fi
have="$("$bindgen" --version | awk '{print $2}')"
if [ "$have" != "$want" ]; then
    echo "build.sh: $bindgen is version $have; this page's Cargo.lock pins wasm-bindgen $want," >&2
    echo "  and the CLI must match it exactly (or its JS glue does not fit the wasm)." >&2
    echo "  install it: cargo install wasm-bindgen-cli --version $want --locked" >&2
    exit 1
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
cargo build --manifest-path "$here/Cargo.toml" --locked --release --target wasm32-unknown-unknown
"$bindgen" --target web --no-typescript --out-dir "$here/pkg" \
    "$CARGO_TARGET_DIR/wasm32-unknown-unknown/release/posenc_web.wasm"
echo "build.sh: built $here/pkg ($(du -k "$here/pkg/posenc_web_bg.wasm" | cut -f1) KiB of wasm)"
