"""Turn ``settings.POSIXCRON`` into validated task declarations, or a list of problems.

Everything here is pure validation of settings: no database, nothing at import time. The
system checks (``django_posixcron.checks``) report the problems; the scheduler and
reconciliation use the declarations.

The parts:

- ``table``: a dict of settings checked against a ``Table``: one ``Key`` row per key (its
  validator and its default), then the ``Rule`` s across keys;
- ``top_level``: the table of ``POSIXCRON`` itself, and ``collect()``;
- ``task``: the table of one task, and its name;
- ``schedule``, ``callables``, ``kwargs``, ``values``: the validators;
- ``problems``: ``Invalid``, what a validator raises, and ``problem()``, the one place a
  message is built from the path, the value, what was expected and the hint.

Adding a task key (``"pause_after_failures": N`` was added this way):

1. Give it a check id in ``ids.py`` (the next free number; never renumber) and a line in the
   table of ids in ``docs/settings.rst``.
2. Write its validator, ``(value, path) -> normalised value``, raising ``Invalid`` with the
   id, the shape of the message (``Form``), what was expected and a hint. A shared one may
   already fit, and ``optional()`` lets ``None`` through::

       Key("pause_after_failures", optional(positive_int(E_PAUSE_AFTER, "Use e.g. 5 ...")),
           default=None)

3. Add the row to ``TASK`` in ``task.py``, where the hint for unknown keys should list it.
   A default read from another setting uses ``default_from`` (``enqueue`` takes the top-level
   ``ENQUEUE``, as ``timezone`` takes ``settings.TIME_ZONE``); a required key gives an
   ``example`` instead.
4. A rule across keys is a ``Rule`` on the same table: ``start_deadline`` only with
   ``enqueue``; ``takes_context`` is among the ``needs`` of ``takes_kwargs``, which binds
   the signature with the context first. The frequency guard is such a rule.
5. Add the field to ``TaskDeclaration`` (named like the key, or say ``attribute=``), and to
   ``definition()`` if it changes what runs: that changes the hash of every task whose value
   it changes, so a default should leave the hash as it was.

A top-level key is a row of ``SETTINGS`` in ``top_level.py``, and a field of
``conf.PosixCronSettings`` for the code that reads it.
"""

from django_posixcron.declarations.declaration import (
    DEFAULT_OVERLAP,
    DEFAULT_RETRY_DELAY,
    TaskDeclaration,
)

# The check ids, public here as they always were.
from django_posixcron.declarations.ids import *  # noqa: F403
from django_posixcron.declarations.problems import Problem
from django_posixcron.declarations.schedule import too_frequent
from django_posixcron.declarations.top_level import (
    collect,
    describe_problems,
    load_declarations,
)
from django_posixcron.declarations.values import MAX_DELAY

__all__ = [
    "DEFAULT_OVERLAP",
    "DEFAULT_RETRY_DELAY",
    "MAX_DELAY",
    "Problem",
    "TaskDeclaration",
    "collect",
    "describe_problems",
    "load_declarations",
    "too_frequent",
]
