"""The ``idt-desk`` command line: parsing, checks with one-line errors, and the commands.

:mod:`~idt_desk.cli.main` builds the parser (its own commands, then those plugins contribute
through the ``idt_desk.commands`` entry points: the reproductions, the GUI's ``gui`` and
``watch``); :mod:`~idt_desk.cli.validate` checks options and settings and says what is wrong
in one line; :mod:`~idt_desk.cli.bench` holds the core's benchmarks.
"""

from __future__ import annotations

from idt_desk.cli.main import main

__all__ = ["main"]
