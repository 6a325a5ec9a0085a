"""The claim builds its runs positionally: the same run Django's keyword constructor builds."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_posixcron.models import Run, RunStatus, Trigger
from django_posixcron.scheduling.claim import new_run
from tests.factories import NOW, SchedulerProcessFactory, TaskFactory

pytestmark = pytest.mark.django_db


def test_a_new_run_is_the_run_the_keyword_constructor_builds() -> None:
    task, process = TaskFactory.create(), SchedulerProcessFactory.create()
    given = {
        "occurrence": NOW,
        "attempt": 2,
        "trigger": Trigger.RETRY,
        "status": RunStatus.RUNNING,
        "scheduled_for": NOW,
        "started_at": NOW,
        "process_label": "host:1",
    }
    expected = Run(task=task, process=process, **given)

    with CaptureQueriesContext(connection) as captured:
        run = new_run(task, process, **given)
        # The relations are cached: reading them costs no query.
        assert (run.task, run.process) == (task, process)
    assert not captured.captured_queries
    for field in Run._meta.concrete_fields:
        assert getattr(run, field.attname) == getattr(expected, field.attname), field.name
    assert run.pk is None
    assert run._state.adding

    run.save()
    assert Run.objects.get(pk=run.pk).attempt == 2


def test_a_field_runs_do_not_have_is_refused_by_name() -> None:
    task, process = TaskFactory.create(), SchedulerProcessFactory.create()
    with pytest.raises(TypeError, match="Run has no fields colour"):
        new_run(task, process, colour="blue")
