"""A process forked by task code never speaks for the scheduler's signal handling.

The child inherits the scheduler's wakeup pipe until its at-fork handler lets go of it: a
SIGTERM reaching the child in between (a pool terminating a worker it has just started) was
read by the scheduler as its own, and the scheduler stopped.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from django_posixcron.scheduling.shutdown import SignalWatcher
from tests.harness.waiting import wait_until


@pytest.fixture
def watcher() -> Iterator[tuple[SignalWatcher, list[str]]]:
    heard: list[str] = []
    watcher = SignalWatcher(on_first=heard.append, on_second=heard.append)
    assert watcher.install()
    try:
        yield watcher, heard
    finally:
        watcher.restore()


def test_a_sigterm_that_reaches_a_child_before_it_lets_go_stays_the_childs(watcher):
    watcher, heard = watcher
    real_forget = watcher.forget_in_child

    def signalled_first() -> None:
        # The SIGTERM arrives in the child before its at-fork handler has let go of the pipe.
        os.kill(os.getpid(), signal.SIGTERM)
        real_forget()

    watcher.forget_in_child = signalled_first
    status: list[int] = []

    def task_code() -> None:  # forks on a thread of the executor, as task code does
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # reached only if the SIGTERM did not end the child
        status.append(os.waitpid(pid, 0)[1])

    forking = threading.Thread(target=task_code)
    forking.start()
    forking.join(30)
    assert status, "the task's thread did not reap its child"
    assert os.waitstatus_to_exitcode(status[0]) == -signal.SIGTERM

    # A signal of our own, after: once the watcher has heard it, it has read all before it.
    os.kill(os.getpid(), signal.SIGINT)
    wait_until(lambda: heard, what="the watcher to hear this process's SIGINT")
    assert heard == ["SIGINT"]
