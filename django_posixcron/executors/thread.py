"""The default executor: a bounded pool of threads in the scheduler process."""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable

from django_posixcron.executors.base import Declared, close_connections, refuse_unrun
from django_posixcron.log import get_logger

logger = get_logger(__name__)

# The worker threads, of any pool, inside a call of task code (a run that timed out or was
# recorded interrupted can still be in one).
_in_call: set[threading.Thread] = set()
_in_call_lock = threading.Lock()


def threads_in_task_code() -> list[threading.Thread]:
    """Return the worker threads still running a call: the process's exit should not wait
    for them, nor tear the interpreter down under them (their connections, still open, are
    then collected with a ResourceWarning, and their code runs on against a finalising
    interpreter)."""
    with _in_call_lock:
        return [thread for thread in _in_call if thread.is_alive()]


class ThreadExecutor:
    """Run jobs in a pool of daemon threads, at most `concurrency` at once.

    Threads are reused between runs (starting one costs more than most short tasks). A run
    recorded as timed out keeps its thread (Python cannot kill a thread): `release()` hands
    its slot to the next run and the pool grows by one thread to serve it, shrinking back when
    the stuck call returns. At most `concurrency` threads stand in for stuck calls: past that,
    a stuck call keeps its slot until it returns, so the pool never holds more than twice
    `concurrency` threads. Threads are daemons so that a task stuck past the shutdown grace
    period cannot keep the process alive.
    """

    stops_on_timeout = False

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency!r}")
        self.concurrency = concurrency
        self._cond = threading.Condition()
        self._busy: set[int] = set()  # slots taken: submitted and not released
        self._calls: set[int] = set()  # jobs submitted whose call has not returned
        self._wakeup: Callable[[], object] | None = None
        self._jobs: queue.SimpleQueue[tuple[int, Callable[[], object]] | None] = queue.SimpleQueue()
        self._threads = 0  # worker threads alive
        self._idle = 0  # of which waiting for a job
        self._queued = 0  # jobs submitted and not yet picked up
        self._closed = False
        self._saturation_logged = False

    def set_wakeup(self, callback: Callable[[], object] | None) -> None:
        """Call `callback` whenever a slot frees up (the loop sleeps until then when full)."""
        self._wakeup = callback

    def invoke(self, key: int, declaration: Declared, context: object | None = None) -> None:
        """Call the task's callable in this (the run's) thread; exceptions propagate.

        `context` (the RunContext of a task that takes it) goes first.
        """
        # What runs is always resolved from settings, never from a path stored in the database.
        args = () if context is None else (context,)
        refuse_unrun(declaration.resolve()(*args, **dict(declaration.kwargs or {})))

    def free_slots(self) -> int:
        with self._cond:
            return self._free_slots()

    def _free_slots(self) -> int:
        # Each call in flight holds a thread, a stuck one included: the pool stops at twice
        # `concurrency` threads however many calls hang.
        return max(0, min(self.concurrency - len(self._busy), self._max_calls - len(self._calls)))

    @property
    def _max_calls(self) -> int:
        return 2 * self.concurrency

    @property
    def stuck(self) -> int:
        """Return how many released (timed-out) calls have not returned yet."""
        with self._cond:
            return len(self._calls - self._busy)

    def submit(self, key: int, job: Callable[[], object]) -> None:
        """Run `job` in a pool thread; `key` (the run id) identifies its slot."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the executor is closed")
            if self._free_slots() < 1:
                raise RuntimeError(
                    f"no free slot for run {key}: free_slots() is 0 "
                    f"({len(self._busy)} running, {len(self._calls - self._busy)} stuck)"
                )
            self._busy.add(key)
            self._calls.add(key)
            self._queued += 1
            grow = self._queued > self._idle
            if grow:
                self._threads += 1
        if grow:
            thread = threading.Thread(
                target=self._worker, name=f"posixcron-worker-{key}", daemon=True
            )
            try:
                thread.start()
            except BaseException:
                with self._cond:
                    self._threads -= 1
                    self._queued -= 1
                    self._calls.discard(key)
                self.release(key)
                raise
        self._jobs.put((key, job))

    def close(self) -> None:
        """Let idle worker threads end; running ones end when their job returns."""
        with self._cond:
            self._closed = True
            idle = self._idle
        for _ in range(idle):
            self._jobs.put(None)

    def kill_all(self) -> None:
        """Stop every running call at once; threads cannot be stopped, so nothing happens."""

    def stop(self, key: int) -> None:
        """A thread cannot be stopped: free its slot now, as release() does."""
        self.release(key)

    def release(self, key: int) -> None:
        """Free the slot of `key` now, whether or not its thread has returned."""
        with self._cond:
            if key not in self._busy:
                return
            self._busy.discard(key)
            self._note_saturation()
            self._cond.notify_all()
        if self._wakeup is not None:
            self._wakeup()

    def _note_saturation(self) -> None:
        """Log once when stuck calls start to keep slots from new runs, and once when not.

        Called with the pool's lock held, from a worker thread giving its slot back (the
        package's loggers never raise: a handler that does loses its record, not the slot).
        """
        stuck = len(self._calls - self._busy)
        if stuck > self.concurrency and not self._saturation_logged:
            self._saturation_logged = True
            logger.warning(
                "%d timed-out calls are still running in their threads, more than the %d "
                "stand-in threads the pool allows: %d of the %d slot(s) stay taken until "
                "they return",
                stuck,
                self.concurrency,
                min(stuck - self.concurrency, self.concurrency),
                self.concurrency,
                extra={"action": "executor_saturated", "stuck": stuck},
            )
        elif stuck <= self.concurrency and self._saturation_logged:
            self._saturation_logged = False
            logger.info(
                "timed-out calls returned: %d stuck, all %d slot(s) usable again",
                stuck,
                self.concurrency,
                extra={"action": "executor_recovered", "stuck": stuck},
            )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no slot is busy; return False if `timeout` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout)

    def _worker(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
            item = self._jobs.get()
            with self._cond:
                self._idle -= 1
                if item is None:
                    self._threads -= 1
                    return
                self._queued -= 1
            key, job = item
            thread = threading.current_thread()
            with _in_call_lock:
                _in_call.add(thread)
            try:
                # In a context of its own, as a new thread's: what task code sets in context
                # variables (timezone.activate(), translation.activate() and every other
                # asgiref Local) ends with its run, not passed on to the thread's next run.
                contextvars.Context().run(job)
            except BaseException:
                # The job records its own outcome; anything reaching here is a bug in it, and
                # a worker thread must never take the process down, nor end.
                logger.exception("run job crashed", extra={"action": "executor_error"})
            finally:
                try:
                    # Each run ends with its thread's connections closed, so a long-lived
                    # scheduler never accumulates idle connections (or keeps a broken one).
                    close_connections(key)
                finally:
                    # Whatever the close did, the slot comes back.
                    with _in_call_lock:
                        _in_call.discard(thread)
                    self._returned(key)
            with self._cond:
                # More threads than slots: one stood in for a stuck (timed-out) call. Shrink.
                if self._threads > self.concurrency or self._closed:
                    self._threads -= 1
                    return

    def _returned(self, key: int) -> None:
        """Note that the call of `key` returned; free its slot if a timeout did not already."""
        with self._cond:
            was_stuck = key in self._calls and key not in self._busy
            self._calls.discard(key)
            if was_stuck:
                self._note_saturation()
                self._cond.notify_all()
        if was_stuck and self._wakeup is not None:
            # A stuck call returning can give a slot back (see _free_slots).
            self._wakeup()
        self.release(key)
