"""Callables the acceptance tests declare: blocking, raising what task code should not."""

from __future__ import annotations

import threading

from tests.testapp.models import Hit

# Events that wait_for_gate blocks on, by task name; the acceptance fixtures open them all.
GATES: dict[str, threading.Event] = {}


def wait_for_gate(task_name: str) -> None:
    """Record a hit, then block (bounded) until the test opens this task's gate."""
    Hit.objects.create(task_name=task_name, label="started")
    gate = GATES.setdefault(task_name, threading.Event())
    if not gate.wait(timeout=20):
        raise TimeoutError(f"gate {task_name!r} was never opened")


def raise_system_exit(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise SystemExit(2)


def raise_keyboard_interrupt(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise KeyboardInterrupt


def raise_value_error(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise ValueError(f"{task_name} broke on purpose")


def fail_then_succeed(task_name: str) -> None:
    """Fail on the first call for this task name, succeed afterwards."""
    first = not Hit.objects.filter(task_name=task_name).exists()
    Hit.objects.create(task_name=task_name, label="failed" if first else "ok")
    if first:
        raise RuntimeError("first call fails")


class UnprintableError(Exception):
    """An exception whose str() itself raises, as some library exceptions do."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")


def raise_unprintable(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)
    raise UnprintableError


def raise_with_nul(task_name: str) -> None:
    """Fail with a message holding a NUL byte (binary output), which PostgreSQL text refuses."""
    Hit.objects.create(task_name=task_name)
    raise ValueError("unexpected bytes b'\x00\x01' in response")


async def coroutine_job(task_name: str) -> None:
    Hit.objects.create(task_name=task_name)


def generator_job(task_name: str):  # type: ignore[no-untyped-def]
    Hit.objects.create(task_name=task_name)
    yield


def takes_anything(**kwargs: object) -> None:
    Hit.objects.create(task_name="takes-anything")
