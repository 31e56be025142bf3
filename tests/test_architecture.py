"""The core and the sources stay free of Qt (import-linter contract in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_core_and_sources_never_import_qt():
    r = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
         "lint_imports_command()"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Contracts: 1 kept, 0 broken" in r.stdout


def test_importing_the_core_loads_no_qt():
    code = (
        "import sys, idt_desk, idt_desk.analyze, idt_desk.cli; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
