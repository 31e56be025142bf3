"""Run the numerical tests once more on the pure-Python path (NUMBA_DISABLE_JIT=1).

numba compiles the kernels; with the JIT disabled the very same functions run as plain
Python. This catches code that only numba accepts, and lets coverage see the kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import NO_JIT

ROOT = Path(__file__).parent.parent
NUMERICAL = ["tests/test_engine.py", "tests/test_symbolize.py"]


@pytest.mark.skipif(NO_JIT, reason="already running without the JIT")
def test_numerical_suite_passes_without_jit():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *NUMERICAL],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
