"""The numbers that name each statistic of :func:`idt_desk.detection.kernels.statistic`.

A detector class declares its kernel by one of them
(:attr:`idt_desk.detection.registry.Detector.kernel`); they live apart from the compiled
kernels so that naming a detector (the command line's help, the settings table) neither
imports numba nor compiles anything.
"""

from __future__ import annotations

__all__ = ["ABS", "CUSUM", "EWMA", "MIN_OF_LAST"]

#: |z|; the smallest |z| of the last m windows; the two-sided CUSUM; the EWMA's |E|.
ABS, MIN_OF_LAST, CUSUM, EWMA = 0, 1, 2, 3
