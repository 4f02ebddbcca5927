"""Mapping tasks: in this process, in a process pool, on a Dask cluster, or anywhere.

Every executor runs the same function, :func:`~graphpass.batch.run_task`, on the same
picklable :class:`~graphpass.batch.ModelTask` objects. An executor is anything with
the :class:`concurrent.futures.Executor` interface: a ``ProcessPoolExecutor``
(:func:`process_pool`), a Dask ``Client``'s ``get_executor()`` (:func:`dask_executor`),
or one of another engine's. Engines with a ``map`` of their own map
:func:`~graphpass.batch.run_task` over :func:`~graphpass.batch.make_tasks` directly.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from graphpass.batch._inputs import find_models, output_paths
from graphpass.batch._tasks import ModelResult, ModelTask, Settings, run_task
from graphpass.errors import GraphpassError

__all__ = ["dask_executor", "make_tasks", "map_tasks", "process_pool", "run"]

OnResult = Callable[[ModelResult, int, int], None]
"""Called as each model is done: the result, how many are done, how many there are."""


def make_tasks(paths: Iterable[str | os.PathLike[str]], settings: Settings, *,
               output_dir: str | os.PathLike[str] | None = None) -> list[ModelTask]:
    """One task per model that ``paths`` (files, folders, globs) name.

    Args:
        paths: Model files, folders (every ``.onnx`` below), globs.
        settings: What to do with each model.
        output_dir: For ``run``: where the outputs go (each at its path below the
            folder or glob that found it). Without it, ``run`` needs ``in_place``.

    Raises:
        GraphpassError: A path names nothing, two outputs would collide, or ``run`` has
            neither an output folder nor ``in_place``.
    """
    arguments = [os.fspath(p) for p in paths]
    skip = [Path(output_dir)] if output_dir is not None else []
    models = find_models(arguments, skip=skip)
    outputs: list[str | None] = [None] * len(models)
    if settings.command == "run":
        if output_dir is not None:
            outputs = [str(p) for p in output_paths(models, Path(output_dir))]
        elif settings.in_place:
            outputs = [model.path for model in models]
        else:
            raise GraphpassError("give the folder the outputs go to (-o DIR), or --in-place "
                                 "to write each model over itself")
    return [ModelTask(str(Path(model.path).absolute()), settings, output, label=model.path)
            for model, output in zip(models, outputs, strict=True)]


def map_tasks(tasks: Sequence[ModelTask], *, executor: Executor | None = None,
              on_result: OnResult | None = None) -> list[ModelResult]:
    """Run every task, in this process or on ``executor``; results in the tasks' order.

    Args:
        tasks: The tasks.
        executor: Where to run them (``None``: here, one after the other).
        on_result: Called as each task is done (for progress).
    """
    results: list[ModelResult | None] = [None] * len(tasks)
    if executor is None:
        for position, task in enumerate(tasks):
            results[position] = run_task(task)
            if on_result is not None:
                on_result(results[position], position + 1, len(tasks))  # type: ignore[arg-type]
        return [r for r in results if r is not None]
    futures: dict[Future[ModelResult], int] = {
        executor.submit(run_task, task): position for position, task in enumerate(tasks)}
    try:
        for done, future in enumerate(as_completed(futures), start=1):
            result = future.result()
            results[futures[future]] = result
            if on_result is not None:
                on_result(result, done, len(tasks))
    except BaseException:
        for future in futures:
            future.cancel()
        raise
    return [r for r in results if r is not None]


def run(paths: Iterable[str | os.PathLike[str]], settings: Settings | None = None, *,
        output_dir: str | os.PathLike[str] | None = None, executor: Executor | None = None,
        on_result: OnResult | None = None) -> list[ModelResult]:
    """Lint (or run passes on) every model that ``paths`` name; one result per model.

    ::

        import graphpass.batch

        results = graphpass.batch.run(["models/"], graphpass.batch.Settings(passes=("check",)))
        worst = graphpass.batch.exit_code(results)

    Args:
        paths: Model files, folders and globs.
        settings: What to do with each model (default: ``lint`` with ``check``).
        output_dir: For ``run``: where outputs go.
        executor: Where tasks run (``None``: here; see :func:`process_pool` and
            :func:`dask_executor`).
        on_result: Called as each model is done.

    Raises:
        GraphpassError: The paths name nothing (see :func:`make_tasks`). A model that
            cannot be checked does not raise: its result carries the error.
    """
    tasks = make_tasks(paths, settings or Settings(), output_dir=output_dir)
    return map_tasks(tasks, executor=executor, on_result=on_result)


def process_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes, started now, that have graphpass imported.

    On Linux the workers are forked from this process, right away, before any thread
    of a progress display or of the pool itself exists: they start at once, with the
    plugins already loaded. Elsewhere (fork is unsafe on macOS, absent on Windows) they
    start from a fork server that imported :mod:`graphpass.batch` once, or are spawned.
    """
    if jobs < 1:
        raise ValueError("jobs must be at least 1")
    methods = multiprocessing.get_all_start_methods()
    context: Any
    if sys.platform.startswith("linux") and "fork" in methods:
        context = multiprocessing.get_context("fork")
    elif "forkserver" in methods:  # pragma: no cover - macOS
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["graphpass.batch"])
    else:  # pragma: no cover - Windows
        context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    # A fork pool starts every worker at its first task, before its own thread starts;
    # one task now, while this process has no other thread, starts them all.
    pool.submit(os.getpid).result()
    return pool


@contextlib.contextmanager
def dask_executor(address: str, *, timeout: float = 30) -> Iterator[Executor]:
    """An executor on the Dask cluster whose scheduler is at ``address``.

    Its workers need graphpass (and the plugins the tasks use) installed, and must see
    the model files at the same paths (tasks carry absolute paths).

    Raises:
        GraphpassError: Dask's distributed scheduler is not installed
            (``pip install graphpass[dask]``), or cannot be reached.
    """
    try:
        import distributed  # untyped: reached through Any below
    except ImportError:
        raise GraphpassError("--executor dask needs dask's distributed scheduler, which is "
                             "not installed", hint="pip install 'graphpass[dask]'") from None
    dask: Any = distributed
    try:
        client = dask.Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as error:
        raise GraphpassError(f"cannot reach the Dask scheduler at {address!r}: {error}",
                             hint="check the address (tcp://HOST:PORT) and that the "
                                  "scheduler is running") from None
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()
