"""The claim builds its runs positionally: the same run Django's keyword constructor builds."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_posixcron.models import Run, RunStatus, Trigger
from django_posixcron.scheduling.claim import new_run
from tests.factories import NOW, SchedulerProcessFactory, TaskFactory
from tests.harness.signals import post_init_seen

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["nobody listening", "a post_init receiver"])
def initialised(request: pytest.FixtureRequest) -> Iterator[list[Run]]:
    """The runs a post_init receiver for Run was sent, when the test has one."""
    yield from post_init_seen(request, Run)


def test_a_new_run_is_the_run_the_keyword_constructor_builds(initialised: list[Run]) -> None:
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
    listening = bool(initialised)  # the receiver saw `expected`
    initialised.clear()

    with CaptureQueriesContext(connection) as captured:
        run = new_run(task, process, **given)
        # The relations are cached: reading them costs no query.
        assert (run.task, run.process) == (task, process)
    assert not captured.captured_queries
    for field in Run._meta.concrete_fields:
        assert getattr(run, field.attname) == getattr(expected, field.attname), field.name
    assert vars(run).keys() == vars(expected).keys()
    assert run.pk is None
    assert (run._state.adding, run._state.db) == (True, None)
    # A receiver of post_init for runs (a field tracker) is sent every run the claim builds.
    assert initialised == ([run] if listening else [])

    run.save()
    assert Run.objects.get(pk=run.pk).attempt == 2


def test_a_field_runs_do_not_have_is_refused_by_name() -> None:
    task, process = TaskFactory.create(), SchedulerProcessFactory.create()
    with pytest.raises(TypeError, match="Run has no fields colour"):
        new_run(task, process, colour="blue")
