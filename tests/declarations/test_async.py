"""Async callables never "succeed" without running: refused by the check, then at run time."""

from __future__ import annotations

import gc
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from django.utils.module_loading import import_string

from django_posixcron.declarations import collect
from django_posixcron.executors import ProcessExecutor, TaskCodeError, ThreadExecutor
from django_posixcron.models import Run, RunStatus
from django_posixcron.scheduler import Scheduler
from tests.harness.declaring import task
from tests.harness.tasks import T0, Tasks
from tests.testapp.models import Hit

CALLABLE = "settings.POSIXCRON['TASKS']['t']['callable']"
ADVICE = (
    "Declare a plain function; it may call asgiref.sync.async_to_sync(your_coroutine)(**kwargs)."
)
WRAPPER_ADVICE = (
    " If the wrapper does run the coroutine to completion, declare a plain function (without "
    "functools.wraps) that calls it."
)
CORO_ERROR = (
    "the callable returned a coroutine: async callables are not supported; wrap it with "
    "asgiref.sync.async_to_sync"
)
GENERATOR_ERROR = (
    "the callable returned a generator, which nothing iterates: its code never ran; declare a "
    "plain function that consumes it"
)


def problems_for(path: str) -> list[tuple[str, str, str]]:
    _, problems = collect({"TASKS": {"t": task(callable=path)}})
    return [(p.id, p.msg, p.hint) for p in problems]


@pytest.mark.parametrize(
    ("name", "what", "hint"),
    [
        (
            "ASYNC_CALL",
            "is a callable object (AsyncCall) whose __call__ is async; calling it does not run "
            "its body",
            ADVICE,
        ),
        ("SYNC_TO_ASYNC", "is an async function; calling it does not run its body", ADVICE),
        (
            "WRAPPED_ASYNC",
            "wraps an async function, tests.testapp.jobs.async_body (found through __wrapped__), "
            "without being async itself; calling it returns the coroutine without running it",
            ADVICE + WRAPPER_ADVICE,
        ),
        (
            "ATOMIC_ASYNC",
            "wraps an async function, tests.testapp.jobs.async_body (found through __wrapped__), "
            "without being async itself; calling it returns the coroutine without running it",
            ADVICE + WRAPPER_ADVICE,
        ),
    ],
)
def test_async_callables_in_disguise_are_e026(name, what, hint):
    path = f"tests.testapp.jobs.{name}"
    assert problems_for(path) == [("posixcron.E026", f"{CALLABLE} = {path!r} {what}.", hint)]


@pytest.mark.parametrize(
    "path",
    [
        "tests.testapp.jobs.ASYNC_TO_SYNC",  # async_to_sync behind a decorator: it runs
        "tests.testapp.jobs.logged",  # a plain function that merely has a decorator's shape
        "tests.testapp.jobs.returns_coroutine",  # no check can see this one: see below
        "tests.testapp.models.Hit",  # a class: calling it builds an instance
    ],
)
def test_sync_callables_pass(path):
    kwargs = {"func": print} if path.endswith("logged") else {}
    _, problems = collect({"TASKS": {"t": task(callable=path, kwargs=kwargs)}})
    assert [p for p in problems if p.id == "posixcron.E026"] == []


class Declared:
    def __init__(self, path: str, kwargs: Mapping[str, Any] | None = None) -> None:
        self.callable_path = path
        self.kwargs = kwargs or {}

    def resolve(self) -> Callable[..., Any]:
        func: Callable[..., Any] = import_string(self.callable_path)
        return func


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("tests.testapp.jobs.returns_coroutine", CORO_ERROR),
        ("tests.testapp.jobs.WRAPPED_ASYNC", CORO_ERROR),
        ("tests.testapp.jobs.ASYNC_CALL", CORO_ERROR),
        ("tests.testapp.jobs.returns_generator", GENERATOR_ERROR),
    ],
)
def test_the_thread_executor_refuses_a_result_that_did_not_run(path, error):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited" either
        with pytest.raises(TypeError) as excinfo:
            ThreadExecutor(1).invoke(1, Declared(path))
        gc.collect()
    assert str(excinfo.value) == error


def test_other_awaitables_are_refused_too():
    from django_posixcron.executors import refuse_unrun

    class Pending:
        def __await__(self) -> Any:
            yield

    with pytest.raises(TypeError) as excinfo:
        refuse_unrun(Pending())
    assert str(excinfo.value).startswith("the callable returned an awaitable Pending: async")

    async def agen() -> Any:
        yield

    with pytest.raises(TypeError) as excinfo:
        refuse_unrun(agen())
    assert str(excinfo.value).startswith("the callable returned an async generator: async")

    results: tuple[object, ...] = (None, 0, "", [], iter(()), types.SimpleNamespace())
    for result in results:
        refuse_unrun(result)


@pytest.mark.django_db(transaction=True)
def test_the_process_executor_refuses_it_in_the_child():
    executor = ProcessExecutor(1)
    try:
        with pytest.raises(TaskCodeError) as excinfo:
            executor.invoke(1, Declared("tests.testapp.jobs.returns_coroutine"))
    finally:
        executor.close()
    assert excinfo.value.error == f"TypeError: {CORO_ERROR}"
    assert "Traceback" in excinfo.value.remote_traceback
    assert not Hit.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_such_a_run_is_recorded_failed_not_succeeded():
    tasks = Tasks()
    tasks("coro", schedule="0 10 * * *", callable_path="tests.testapp.jobs.returns_coroutine")
    declarations: Any = tasks.declarations  # stand-ins with what the scheduler reads
    scheduler = Scheduler(declarations=declarations, poll_interval=1, concurrency=1)
    try:
        scheduler.tick(T0)
        assert scheduler.wait_idle(timeout=10)
    finally:
        scheduler.executor.close()
    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.FAILED, f"TypeError: {CORO_ERROR}")
    assert not Hit.objects.exists()
