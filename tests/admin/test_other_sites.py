"""The app on admin sites of a project's own: an operators' site beside /admin/, and one
without the run list. Every link, form and redirect stays on the site it was served from."""

from __future__ import annotations

import re

import pytest

from django_posixcron.models import RunStatus
from tests.admin.conftest import client_for, make_run, make_task

pytestmark = pytest.mark.django_db


def links(html: str) -> list[str]:
    return re.findall(r'(?:href|action)="(/[^"]*django_posixcron[^"]*)"', html)


def test_the_task_page_on_another_site_links_and_posts_to_that_site(superuser):
    # Reversed without the site, every link, the buttons' forms and the redirect after a
    # pause went to /admin/: an operator allowed only on /ops/ landed on the other site.
    task = make_task(name="nightly")
    make_run(task, status=RunStatus.FAILED, error="boom")
    client = client_for(superuser)
    html = client.get(f"/ops/django_posixcron/task/{task.pk}/change/").content.decode()
    found = links(html)
    assert f"/ops/django_posixcron/task/{task.pk}/pause/" in found
    assert f"/ops/django_posixcron/task/{task.pk}/run/" in found
    assert any(link.startswith("/ops/django_posixcron/run/?task=") for link in found)
    assert any(re.fullmatch(r"/ops/django_posixcron/run/\d+/change/", link) for link in found)
    assert not [link for link in found if link.startswith("/admin/")]

    response = client.post(f"/ops/django_posixcron/task/{task.pk}/pause/")
    assert response.status_code == 302
    assert response["Location"] == f"/ops/django_posixcron/task/{task.pk}/change/"


def test_the_run_list_on_another_site_links_to_that_sites_task_pages(superuser):
    task = make_task(name="nightly")
    make_run(task)
    html = client_for(superuser).get("/ops/django_posixcron/run/").content.decode()
    assert f'href="/ops/django_posixcron/task/{task.pk}/change/"' in html
    assert f'href="/admin/django_posixcron/task/{task.pk}/change/"' not in html


def test_the_task_page_on_a_site_without_the_run_list_leaves_the_runs_out(superuser):
    # A 500 (NoReverseMatch for the run list) on a site that registers only the task admin.
    task = make_task(name="nightly")
    make_run(task)
    response = client_for(superuser).get(f"/tasks-only/django_posixcron/task/{task.pk}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "nightly" in html
    assert 'id="posixcron-recent-runs"' not in html
    assert f"/tasks-only/django_posixcron/task/{task.pk}/pause/" in links(html)
