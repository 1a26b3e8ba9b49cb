"""Shared fixtures: the posenc binary the results are compared with, bit for bit, and the
devices to run on.

The binary is ``$POSENC_CLI``, else ``target/release/posenc`` of this repository (build it
with ``cargo build --release``). GPU tests skip without an adapter, except under
``CI=true``, where a missing adapter fails them (as the Rust tests do).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Triton (which torch._dynamo imports, and transformers with it) bundles its own LLVM,
# which crashes the process when it loads after Mesa's software drivers (lavapipe,
# llvmpipe) have loaded theirs; the other order works. The GPU is opened below, so torch
# comes first. docs/python.md has the same note for users.
try:
    import torch._dynamo  # noqa: F401
except ImportError:
    pass

import posenc

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "corpus" / "configs"
CLI = Path(os.environ.get("POSENC_CLI", REPO / "target" / "release" / "posenc"))
IN_CI = os.environ.get("CI") == "true"


def pytest_report_header(config):
    return [f"posenc module: {posenc.__file__}", f"posenc binary: {CLI}"]


def pytest_configure(config):
    # The suite tests the installed package, not the source tree beside it.
    source = REPO / "python" / "python" / "posenc"
    if Path(posenc.__file__).resolve().parent == source.resolve():
        raise pytest.UsageError(
            "posenc was imported from the source tree; install the wheel "
            "(pip install ./python) and run pytest from outside python/python"
        )


def _have_gpu() -> bool:
    try:
        return bool(posenc.devices())
    except Exception:  # noqa: BLE001
        return False


HAVE_GPU = _have_gpu()


@pytest.fixture(params=["cpu", "gpu"])
def device(request):
    """Each test that takes it runs on the CPU and on the GPU."""
    if request.param == "gpu" and not HAVE_GPU:
        if IN_CI:
            pytest.fail("CI=true: no GPU adapter (install mesa-vulkan-drivers)")
        pytest.skip("SKIP: no GPU adapter")
    return request.param


class Cli:
    """Runs the posenc binary."""

    def __init__(self, tmp: Path) -> None:
        if not CLI.exists():
            pytest.fail(f"no posenc binary at {CLI}: run cargo build --release, or set POSENC_CLI")
        self.tmp = tmp
        self.count = 0

    def run(self, *args, env=None) -> subprocess.CompletedProcess:
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        return subprocess.run(
            [str(CLI), *map(str, args)], capture_output=True, text=True, env=full_env,
            timeout=300,
        )

    def npy(self, *args, **kwargs) -> np.ndarray:
        """Runs a command writing ``-o OUT.npy`` and loads the result."""
        self.count += 1
        out = self.tmp / f"cli-{self.count}.npy"
        done = self.run(*args, "-o", out, **kwargs)
        assert done.returncode == 0, done.stderr
        return np.load(out)

    def save(self, name: str, array: np.ndarray) -> Path:
        path = self.tmp / name
        np.save(path, array)
        return path

    def error(self, *args, env=None) -> str:
        """The one-line message of a failing command, without ``posenc: ``."""
        done = self.run(*args, env=env)
        assert done.returncode != 0, f"expected a failure: {args}"
        lines = [l for l in done.stderr.splitlines() if not l.startswith("posenc: note:")]
        assert len(lines) == 1, done.stderr
        assert lines[0].startswith("posenc: "), lines[0]
        return lines[0][len("posenc: "):]


@pytest.fixture
def cli(tmp_path) -> Cli:
    return Cli(tmp_path)


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    """Equal shapes, dtypes and bits."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    assert a.dtype.itemsize == b.dtype.itemsize, (a.dtype, b.dtype)
    unsigned = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    ua = np.ascontiguousarray(a).view(unsigned)
    ub = np.ascontiguousarray(b).view(unsigned)
    if not np.array_equal(ua, ub):
        bad = np.argwhere(ua != ub)
        first = tuple(bad[0])
        raise AssertionError(
            f"{len(bad)} of {a.size} values differ; first at {first}: {a[first]!r} vs {b[first]!r}"
        )


sys.modules.setdefault("posenc_test_support", sys.modules[__name__])
