"""Callables that tests declare as tasks."""

from tests.testapp.models import Hit


def record(label: str = "", task_name: str = "record") -> None:
    Hit.objects.create(task_name=task_name, label=label)


def noop() -> None:
    return None


def fail() -> None:
    raise RuntimeError("boom")


NOT_CALLABLE = 42


# --- scheduler tests (H3): callables that block, or raise what task code should not raise ---

import threading  # noqa: E402

# Events a test sets to let a blocked task return; keyed so concurrent tests do not collide.
GATES: dict[str, threading.Event] = {}


def gate(name: str) -> threading.Event:
    return GATES.setdefault(name, threading.Event())


def blocked(gate_name: str = "default", task_name: str = "blocked") -> None:
    """Record a hit, then wait (bounded) until the test opens the gate."""
    Hit.objects.create(task_name=task_name, label="started")
    if not gate(gate_name).wait(timeout=30):
        raise TimeoutError(f"gate {gate_name!r} was never opened")


def exit_now() -> None:
    raise SystemExit(3)


def interrupt() -> None:
    raise KeyboardInterrupt


def huge_failure() -> None:
    raise ValueError("x" * 200_000)


def sleep_for(seconds: float = 60.0) -> None:
    """Sleep without touching the database (runs in the process executor's children too)."""
    import time

    time.sleep(seconds)


# --- async callables in disguise (E026 and the executors' run-time refusal) ---

import functools  # noqa: E402
from collections.abc import Callable, Coroutine, Iterator  # noqa: E402
from typing import Any  # noqa: E402

from asgiref.sync import async_to_sync, sync_to_async  # noqa: E402
from django.db import transaction  # noqa: E402


async def async_body() -> None:
    Hit.objects.create(task_name="async-body")  # never reached: nothing awaits it


def logged(func: Callable[..., Any]) -> Callable[..., Any]:
    """A sync decorator that passes the result through: a coroutine stays unawaited."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


class AsyncCall:
    async def __call__(self) -> None:
        Hit.objects.create(task_name="async-call")


ASYNC_CALL = AsyncCall()
SYNC_TO_ASYNC = sync_to_async(noop)
WRAPPED_ASYNC = logged(async_body)
ATOMIC_ASYNC = transaction.atomic(async_body)
# The fix E026 advises, even behind a sync decorator: it runs the coroutine.
ASYNC_TO_SYNC = logged(async_to_sync(async_body))


def returns_coroutine() -> Coroutine[Any, Any, None]:
    """A plain function no check can see through: it hands back the coroutine it made."""
    return async_body()


def returns_generator() -> Iterator[int]:
    return (Hit.objects.create(task_name="generator").pk for _ in range(1))


# --- the process executor: process groups, the forced exit, jobs with processes of their own ---


def spawn_and_sleep(directory: str, seconds: float = 3.0) -> None:
    """Start a grandchild, note both pids in `started`, sleep, then leave a `finished` file.

    Files only, no database: the markers say what ran even when the run is killed mid-way.
    """
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    folder = Path(directory)
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    (folder / "started.tmp").write_text(f"{os.getpid()} {grandchild.pid}")
    os.replace(folder / "started.tmp", folder / "started")
    time.sleep(seconds)
    (folder / "finished").touch()
    grandchild.kill()
    grandchild.wait()


def uses_multiprocessing(path: str) -> None:
    """Compute with a multiprocessing pool, then write the result to `path`."""
    import multiprocessing
    from pathlib import Path

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        values = pool.map(abs, [-1, -2, -3])
    Path(path).write_text(",".join(map(str, values)))
