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
