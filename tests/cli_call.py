"""Calling the command line in-process, for the CLI tests."""

from __future__ import annotations

import contextlib
import io

from idt_desk.cli import main


def call(argv: list[str]) -> tuple[int, str, str]:
    """main(argv) in-process: (exit code, stdout, stderr). Any other exception escapes."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse: 2 for a usage error, 0 for --help
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()
