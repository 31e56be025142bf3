"""The reproductions' shared executor: results in task order, progress weights, resuming."""

from __future__ import annotations

import concurrent.futures

import pytest

from idt_desk.experiment import run_tasks


def _square(x: int) -> int:
    return x * x


def test_results_come_back_in_task_order_whatever_order_they_finish():
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert run_tasks(_square, [5, 1, 4, 2, 3], executor=ex, progress=False) == \
            [25, 1, 16, 4, 9]
    assert run_tasks(_square, [], progress=False) == []


def test_a_rerun_does_only_the_tasks_left(tmp_path):
    calls: list[int] = []

    def counted(x: int) -> int:
        calls.append(x)
        if x == 3:
            raise RuntimeError("interrupted")
        return x * x

    with concurrent.futures.ThreadPoolExecutor(1) as ex, pytest.raises(RuntimeError):
        run_tasks(counted, [1, 2, 3], executor=ex, progress=False, resume_dir=tmp_path)
    assert len(list(tmp_path.glob("*.pkl"))) == 2  # the two that finished were kept
    calls.clear()

    def fixed(x: int) -> int:
        calls.append(x)
        return x * x

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        got = run_tasks(fixed, [1, 2, 3], executor=ex, progress=False, resume_dir=tmp_path)
    assert got == [1, 4, 9] and calls == [3]
    with concurrent.futures.ThreadPoolExecutor(1) as ex:  # a different task is not a cached one
        got = run_tasks(fixed, [1, 7], executor=ex, progress=False, resume_dir=tmp_path)
    assert got == [1, 49] and calls == [3, 7]
