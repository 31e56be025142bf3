"""The runnable examples in the docstrings of the public entry points, run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: Modules whose examples a user is meant to copy: each must have at least one, and pass.
MODULES = ("idt_desk.metrics.engine", "idt_desk.pipeline", "idt_desk.detection.monitor",
           "idt_desk.plugin", "idt_desk.detection.detectors", "idt_desk.detection.spec",
           "idt_desk.live.recorder", "idt_desk.gym.monitor", "idt_desk.words",
           "idt_desk.recordings.runs")


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_run(name):
    if name == "idt_desk.gym.monitor":
        pytest.importorskip("gymnasium")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0, f"{name}: no example"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} failed"
