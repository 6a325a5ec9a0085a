"""Where claimed runs execute: threads of the scheduler process, or child processes."""

from django_posixcron.executors.base import (
    Declared,
    Executor,
    TaskCodeError,
    describe_exception,
    refuse_unrun,
)
from django_posixcron.executors.process import ProcessExecutor
from django_posixcron.executors.thread import ThreadExecutor

__all__ = [
    "Declared",
    "Executor",
    "ProcessExecutor",
    "TaskCodeError",
    "ThreadExecutor",
    "describe_exception",
    "refuse_unrun",
]
