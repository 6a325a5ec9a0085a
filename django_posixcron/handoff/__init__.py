"""Hand-off to Django Tasks: the scheduler decides when, the project's backend where.

DESIGN section 6. The claim records a handed-off run as ``queued`` and enqueues
``django_posixcron.tasks.execute_run`` (enqueue.py); a worker of the backend flips it to
``running``, executes it and records its outcome (worker.py); the scheduler marks lost the
runs no worker started in time and those whose worker went silent (liveness.py).
"""
