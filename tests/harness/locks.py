"""Holding a lock from another connection, as a scheduler frozen in the middle of a
transaction does: the lock stays taken until the test lets it go."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from django.db import connections, transaction

from django_posixcron.models import Task


@contextmanager
def held_elsewhere(
    hold: Callable[[], AbstractContextManager[Any]], *, timeout: float = 30
) -> Iterator[None]:
    """Enter `hold()` on a thread of its own (its own connection) and stay inside it for the
    `with` block; the thread closes its connection when it is let go."""
    taken, release, done = threading.Event(), threading.Event(), threading.Event()

    def target() -> None:
        try:
            with hold():
                taken.set()
                release.wait(timeout * 2)
        finally:
            connections.close_all()
            done.set()

    holder = threading.Thread(target=target)
    holder.start()
    try:
        assert taken.wait(timeout), "the other connection never took the lock"
        yield
    finally:
        release.set()
        holder.join(timeout)
    assert done.is_set()


@contextmanager
def _task_row_locked(**lookup: Any) -> Iterator[None]:
    with transaction.atomic():
        list(Task.objects.select_for_update().filter(**lookup))
        yield


def task_row_held(**lookup: Any) -> AbstractContextManager[None]:
    """Hold the rows of the tasks matching `lookup` locked from another connection."""
    return held_elsewhere(lambda: _task_row_locked(**lookup))
