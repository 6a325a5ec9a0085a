"""A task whose definition change waits for live schedulers of another version."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from django_posixcron.deployments import record
from django_posixcron.models import SchedulerProcess
from tests.admin.conftest import client_for, make_task

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_posixcron_task_changelist")
BADGE = 'class="posixcron-badge posixcron-pending"'


def live(pid: int, hashes: dict[str, str]) -> SchedulerProcess:
    return SchedulerProcess.objects.create(
        hostname="web",
        pid=pid,
        last_heartbeat_at=timezone.now(),
        declaration_set=record("default", hashes),
    )


def test_the_list_and_the_page_mark_a_pending_change(superuser):
    changed = make_task(name="changed")
    steady = make_task(name="steady")
    old = {"changed": changed.definition_hash, "steady": steady.definition_hash}
    live(1, old)
    client = client_for(superuser)

    # One version live: nothing pending, no column.
    page = client.get(LIST).content.decode()
    assert BADGE not in page
    assert "<span>Deploy</span>" not in page

    live(2, {**old, "changed": "f" * 64})
    page = client.get(LIST).content.decode()
    assert page.count(BADGE) == 1
    assert "<span>Deploy</span>" in page
    assert f"changed: stored {changed.definition_hash[:12]} held by web:1" in page

    task_page = client.get(reverse("admin:django_posixcron_task_change", args=[changed.pk]))
    assert BADGE in task_page.content.decode()
    assert f"{'f' * 12} by web:2" in task_page.content.decode()
    steady_page = client.get(reverse("admin:django_posixcron_task_change", args=[steady.pk]))
    assert BADGE not in steady_page.content.decode()
