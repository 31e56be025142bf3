"""Running a reproduction's independent tasks, and writing what it found.

Every ``idt-desk reproduce ...`` command is a list of small, picklable tasks (a pendulum run,
a group of cheetah trials) and a function that does one. :func:`run_tasks` executes them

- on local worker processes (a spawn-context ``ProcessPoolExecutor``, one per core by
  default), or
- on a Dask cluster (``scheduler="tcp://host:8786"``; the workers must be able to import
  this package and the source's), or
- on any executor the caller passes (anything with ``submit(fn, arg)`` returning futures; a
  ``dask.distributed.Client`` is recognised),

with a progress bar, and returns the results in task order whatever order they finished in.
:func:`write_report` writes the outputs every reproduction has: a per-row CSV, the shared
``summary.json`` layout (:func:`idt_desk.experiments.analyze.summary_document`), a Markdown
table and a figure.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from idt_desk.errors import InputError

__all__ = ["DASK_MISSING", "add_executor_arguments", "dask_client", "default_workers",
           "executor_description", "run_tasks", "write_report"]

DASK_MISSING = "install the dask extra: pip install 'idt-desk[dask]'"


def add_executor_arguments(parser: Any, workers: str = "worker processes") -> None:
    """A reproduction's options for where it runs and what it writes.

    --workers, --scheduler, --out and --no-progress; ``workers``: what runs at once, in the
    help.
    """
    from pathlib import Path

    parser.add_argument("--workers", type=int, default=None,
                        help=f"{workers} at once (default: all cores; 0: in this process, "
                             "one task after another, no worker to start)")
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="run on a Dask scheduler, e.g. tcp://host:8786 (needs the dask "
                             "extra; workers must have idt-desk installed; it exchanges "
                             "pickles with this process: a cluster you trust)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _is_dask(executor: object) -> bool:
    return type(executor).__module__.split(".")[0] == "distributed"


def dask_client(address: str) -> Any:
    """A ``dask.distributed.Client`` to ``address``.

    Raises
    ------
    InputError
        Dask is not installed, or the scheduler does not answer.

    """
    try:
        from distributed import Client
    except ImportError:
        raise InputError(DASK_MISSING) from None
    try:
        return Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"cannot connect to the Dask scheduler at {address}: {msg}") from None


def run_tasks(
    fn: Callable[[Any], Any],
    tasks: Sequence[Any],
    *,
    executor: Any | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    desc: str = "tasks",
    unit: str = "task",
    weight: Callable[[Any], int] | None = None,
    resume_dir: Path | None = None,
    key: Callable[[Any], str] | None = None,
    poll: Callable[[], int] | None = None,
) -> list[Any]:
    """``[fn(t) for t in tasks]``, run in parallel, with a progress bar.

    Parameters
    ----------
    fn
        A module-level function (it is pickled by reference).
    tasks
        Its arguments, one per call.
    executor
        Runs the calls and is left open. By default one is made and closed at the end,
        pending calls cancelled on an error or Ctrl-C.
    workers
        Processes of the default ``ProcessPoolExecutor`` (spawn context; default: all cores).
        0: no executor, each task run in this process in turn (as PyTorch's
        ``DataLoader(num_workers=0)``): nothing to start or import again, a debugger or a
        profiler sees the tasks; saved and counted on the bar as the pool's results are.
    scheduler
        Address of a Dask scheduler: a ``Client`` to it is the default executor instead.
    progress, desc, unit
        The tqdm bar on stderr.
    weight
        How many ``unit`` one task counts for on the bar (default 1).
    resume_dir, key
        Each result is saved in ``resume_dir`` as it arrives (``<key(task)>.pkl``, written
        atomically), and a task whose result is already there is not run again: an
        interrupted run, run again, does only what is left. ``key`` must change whenever
        anything the result depends on does (default: a hash of the pickled task).
    poll
        For tasks that take minutes: called every second, it returns the ``unit`` done so far
        across all tasks (e.g. lines the tasks have written), and the bar follows it between
        results. Local executors only; a Dask bar moves per result.

    Returns
    -------
    list
        The results, in the order of ``tasks``.

    Raises
    ------
    InputError
        Dask missing (``scheduler``) or an unreachable scheduler.

    """
    from tqdm.auto import tqdm

    tasks = list(tasks)
    results: list[Any] = [None] * len(tasks)
    saved: dict[int, Path] = {}
    if resume_dir is not None:
        resume_dir = Path(resume_dir)
        resume_dir.mkdir(parents=True, exist_ok=True)
        for j, t in enumerate(tasks):
            saved[j] = resume_dir / f"{(key or _task_key)(t)}.pkl"
            if saved[j].exists():
                with open(saved[j], "rb") as f:
                    results[j] = pickle.load(f)
    todo = [j for j in range(len(tasks)) if not (j in saved and saved[j].exists())]
    if not todo:
        return results
    owned = None
    here = executor is None and not scheduler and workers == 0  # no executor: this process
    if executor is None and not here:
        if scheduler:
            executor = owned = dask_client(scheduler)
        else:
            # spawn: safe whatever threads the caller has (a GUI, a Dask client, tqdm's
            # monitor); numba's on-disk cache keeps the workers' start cheap.
            executor = owned = concurrent.futures.ProcessPoolExecutor(
                max_workers=min(workers or default_workers(), len(todo)),
                mp_context=multiprocessing.get_context("spawn"),
            )
    previous = None
    if owned is not None and threading.current_thread() is threading.main_thread():
        # SIGTERM (kill, pkill) ends the run as Ctrl-C does: pending tasks cancelled, the
        # workers stopped. By default it would end this process alone, and the workers
        # would run their tasks on (a dialogue: minutes more of turns appended to its file).
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        if here:
            futures = [concurrent.futures.Future() for _ in todo]
            done = _run_here(fn, [tasks[j] for j in todo], futures)
        elif _is_dask(executor):
            from distributed import as_completed as dask_as_completed

            # pure=False: never reuse a cached result under a content-hashed key.
            futures = [executor.submit(fn, tasks[j], pure=False) for j in todo]
            done: Iterable[Any] = dask_as_completed(futures)
        else:
            futures = [executor.submit(fn, tasks[j]) for j in todo]
            done = _as_completed(futures, poll)
        index = {id(f): j for f, j in zip(futures, todo, strict=True)}

        def count(js: Iterable[int]) -> int:
            return sum(weight(tasks[j]) for j in js) if weight else len(list(js))

        try:
            initial = (poll() if poll is not None
                       else count(set(range(len(tasks))) - set(todo)))
            with tqdm(total=count(range(len(tasks))), initial=initial,
                      disable=not progress, desc=desc, unit=unit) as bar:
                for fut in done:
                    if fut is None:  # a poll tick
                        bar.update(max(0, poll() - bar.n))
                        continue
                    j = index[id(fut)]
                    results[j] = fut.result()
                    if j in saved:
                        tmp = saved[j].with_suffix(".tmp")
                        with open(tmp, "wb") as f:
                            pickle.dump(results[j], f)
                        os.replace(tmp, saved[j])
                    if poll is None:
                        bar.update(weight(tasks[j]) if weight else 1)
                    else:
                        bar.update(max(0, poll() - bar.n))
        except BaseException:
            for fut in futures:
                fut.cancel()
            if owned is not None and not _is_dask(owned):
                _stop_workers(owned)  # a running task would otherwise run on to its end
            raise
        return results
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if owned is not None:
            if _is_dask(owned):
                owned.close()  # not shutdown(): that would stop a shared scheduler
            else:
                owned.shutdown(wait=True, cancel_futures=True)


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def _stop_workers(executor: Any) -> None:
    """Terminate a ``ProcessPoolExecutor``'s worker processes (their tasks are abandoned)."""
    for proc in list((getattr(executor, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()


def _run_here(fn: Callable[[Any], Any], args: list[Any], futures: list[Any]) -> Iterable[Any]:
    """``workers=0``: each call made in this process when its result is asked for.

    An exception is the future's, as a worker's would be; Ctrl-C stops the run at once.
    """
    for arg, fut in zip(args, futures, strict=True):
        try:
            fut.set_result(fn(arg))
        except Exception as exc:
            fut.set_exception(exc)
        yield fut


def _as_completed(futures: list[Any], poll: Callable[[], int] | None) -> Iterable[Any]:
    """``as_completed``, yielding ``None`` every second while waiting when ``poll`` is set."""
    if poll is None:
        yield from concurrent.futures.as_completed(futures)
        return
    pending = set(futures)
    while pending:
        done, pending = concurrent.futures.wait(
            pending, timeout=1.0, return_when=concurrent.futures.FIRST_COMPLETED)
        yield from done
        if not done:
            yield None


def _task_key(task: Any) -> str:
    return hashlib.sha256(pickle.dumps(task)).hexdigest()[:24]


def executor_description(workers: int | None, scheduler: str | None) -> str:
    """Where tasks run, in words (for tables and summaries)."""
    if scheduler:
        return scheduler
    return "this process" if workers == 0 else f"{workers or default_workers()} worker process(es)"


def write_report(
    out: Path,
    *,
    rows: Any,
    rows_name: str,
    summary: dict[str, Any],
    markdown: str,
    figure: Callable[[Path], None] | None = None,
    figure_name: str = "figure.png",
) -> list[Path]:
    """Write a reproduction's outputs into ``out`` (created if needed).

    Parameters
    ----------
    out
        The output folder.
    rows, rows_name
        The per-row table (a pandas DataFrame) and its file name: a CSV, without the index.
    summary
        A :func:`~idt_desk.experiments.analyze.summary_document`: ``out/summary.json``.
    markdown
        The table beside the paper's values: ``out/table.md``.
    figure, figure_name
        A function that draws the figure into the path it is given, and the file name.

    Returns
    -------
    list of pathlib.Path
        The files written.

    """
    from idt_desk.experiments.analyze import write_summary

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / rows_name, out / "summary.json", out / "table.md"]
    rows.to_csv(paths[0], index=False)
    write_summary(summary, paths[1])
    paths[2].write_text(markdown)
    if figure is not None:
        paths.append(out / figure_name)
        figure(paths[-1])
    return paths
