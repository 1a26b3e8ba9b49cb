#!/usr/bin/env python3
"""Lists the lines of the repository's Rust files longer than rustfmt's `max_width`.

rustfmt keeps code within `max_width` (rustfmt.toml) but leaves comments and string
literals as written, so a line can pass `cargo fmt --check` and still be too wide. This
counts every line of the Rust files cargo builds (src, tests, benches, examples, fuzz),
comments and strings included, in characters.

  python3 scripts/width.py                      # all of them
  python3 scripts/width.py --except src/gpu/    # leaving out paths that start so

Prints `path:line: width` for each line over the limit and a count, and exits 1 if there is
one. CI runs it (.ci/run).
"""

import re
import subprocess
import sys
from pathlib import Path


# What cargo builds: the crate, its tests, benches, examples, fuzz targets and build script
# (docs/measurements keeps the programs of past measurements as they ran).
ROOTS = ["src/*.rs", "tests/*.rs", "benches/*.rs", "examples/*.rs", "fuzz/*.rs", "build.rs"]


def max_width(root):
    text = (root / "rustfmt.toml").read_text()
    match = re.search(r"^max_width\s*=\s*(\d+)", text, re.M)
    return int(match.group(1)) if match else 100


def main(argv):
    root = Path(__file__).resolve().parent.parent
    skip = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--except"]
    width = max_width(root)
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *ROOTS],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()
    over = 0
    for name in sorted(files):
        if any(name.startswith(s) for s in skip) or not (root / name).is_file():
            continue
        for number, line in enumerate((root / name).read_text().splitlines(), 1):
            if len(line) > width:
                print(f"{name}:{number}: {len(line)}")
                over += 1
    print(f"{over} line(s) over max_width {width}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
