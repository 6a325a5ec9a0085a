"""A task as settings declare it, once validated: what reconciling stores and the scheduler runs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

# A missing retry_delay still retries: five minutes is long enough for a flapping dependency
# to recover and short enough that a daily job is not silently skipped for a day.
DEFAULT_RETRY_DELAY = dt.timedelta(seconds=300)
DEFAULT_OVERLAP = "skip"
# How long a run handed to a Django Tasks backend may wait for a worker before it is lost.
DEFAULT_START_DEADLINE = dt.timedelta(seconds=300)
MIN_START_DEADLINE = dt.timedelta(seconds=10)


@dataclasses.dataclass(frozen=True)
class Enqueue:
    """Where a handed-off task's runs go: a Django Tasks backend alias, queue and priority.

    ``"enqueue": True`` is all defaults, as Django Tasks' own: backend ``default``, queue
    ``default``, priority 0.
    """

    backend: str = "default"
    queue_name: str = "default"
    priority: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "queue_name": self.queue_name, "priority": self.priority}


# Slots: a project may declare 100,000 tasks, and an instance dict costs more than its values.
@dataclasses.dataclass(frozen=True, slots=True)
class TaskDeclaration:
    """One task as settings declare it, normalised and validated."""

    name: str
    schedule: str  # normalised by the engine, so spacing changes are not definition changes
    callable_path: str
    kwargs: dict[str, Any]
    timezone: str
    retry_delay: dt.timedelta = DEFAULT_RETRY_DELAY
    overlap: str = DEFAULT_OVERLAP
    timeout: dt.timedelta | None = None
    description: str = ""
    # Pass a RunContext first. It changes what runs, so it is part of the definition, but
    # only when set: the hash of every task that does not take it stays as it was.
    takes_context: bool = False
    # Pause after this many failures in a row: a policy read from settings when an outcome is
    # written, not part of what runs, so not in the definition.
    pause_after_failures: int | None = None
    # Hand runs to a Django Tasks backend instead of executing them here (DESIGN section 6).
    # Where a run executes changes which code runs it, so both are in the definition, but
    # only when set: the hash of every task executed in the scheduler stays as it was.
    enqueue: Enqueue | None = None
    start_deadline: dt.timedelta = DEFAULT_START_DEADLINE
    # The definition hash's digest, computed on first use (a frozen, slotted class has no
    # cached_property): not part of equality or the repr. Its 32 bytes, not the 64-character
    # hex the database stores: a process holds one per declared task for its lifetime, and
    # the hex strings were 5 MiB more at 100,000 tasks.
    _digest: bytes | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def definition(self) -> dict[str, Any]:
        """Return the definition as plain JSON-able values, the input of the hash."""
        extra: dict[str, Any] = {"takes_context": True} if self.takes_context else {}
        if self.enqueue is not None:
            extra["enqueue"] = self.enqueue.as_dict()
            extra["start_deadline_us"] = _microseconds(self.start_deadline)
        return extra | {
            "name": self.name,
            "schedule": self.schedule,
            "callable": self.callable_path,
            "kwargs": self.kwargs,
            "timezone": self.timezone,
            "retry_delay_us": _microseconds(self.retry_delay),
            "overlap": self.overlap,
            "timeout_us": None if self.timeout is None else _microseconds(self.timeout),
            "description": self.description,
        }

    @property
    def definition_digest(self) -> bytes:
        """Return the sha256 digest of the normalised definition, computed once."""
        digest = self._digest
        if digest is None:
            text = json.dumps(
                self.definition(), sort_keys=True, separators=(",", ":"), ensure_ascii=True
            )
            digest = hashlib.sha256(text.encode("ascii")).digest()
            object.__setattr__(self, "_digest", digest)
        return digest

    @property
    def definition_hash(self) -> str:
        """Return a stable sha256 hex digest of the normalised definition."""
        return self.definition_digest.hex()

    def resolve(self) -> Callable[..., Any]:
        """Import the callable; settings name it, the database never does."""
        func: Callable[..., Any] = import_string(self.callable_path)
        return func


def _microseconds(delta: dt.timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
