"""The Django Task that workers run for handed-off runs: ``execute_run(run_id)``.

Enqueued by the scheduler on the backend a task's ``enqueue`` names (DESIGN section 6);
importing this module needs Django 6's ``django.tasks`` or the ``django_tasks`` backport.
"""

from __future__ import annotations

from django_posixcron.handoff.framework import framework, module_alias, module_queue


@framework().task(  # type: ignore[untyped-decorator]
    backend=module_alias(), queue_name=module_queue()
)
def execute_run(run_id: int, database: str | None = None) -> None:
    """Execute the queued run `run_id` once, here, and record its outcome.

    Takes exactly the run's primary key, and the alias of the database that holds it when a
    scheduler started with `runscheduler --database` queued it (otherwise the routers choose,
    as everywhere). A duplicate delivery returns normally and changes nothing.
    """
    from django_posixcron.handoff.worker import execute

    execute(run_id, database)
