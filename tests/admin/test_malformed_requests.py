"""Query strings and selections no page links to: Django's "invalid lookup" or a 400, never
a 500."""

from __future__ import annotations

import pytest
from django.http.response import HttpResponseBase
from django.urls import reverse

from django_posixcron.models import SchedulerProcess
from tests.admin.conftest import client_for, make_run, make_task

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:django_posixcron_task_changelist")
RUNS = reverse("admin:django_posixcron_run_changelist")
PROCESSES = reverse("admin:django_posixcron_schedulerprocess_changelist")

# Past the 64-bit range of the primary keys: SQLite's driver cannot even bind it.
TOO_LARGE = str(2**63)


def invalid_lookup(response: HttpResponseBase) -> bool:
    """Return whether Django answered as it does for a lookup it cannot run."""
    return response.status_code == 302 and str(response["Location"]).endswith("?e=1")


@pytest.mark.parametrize(
    "query",
    [
        "scheduled_for__year=9999",
        "scheduled_for__year=9999&scheduled_for__month=12",
        "scheduled_for__year=9999&scheduled_for__month=12&scheduled_for__day=31",
        f"scheduled_for__year={2**31}",
    ],
)
def test_a_date_drill_down_past_the_last_year_is_an_invalid_lookup(superuser, query):
    run = make_run(make_task())
    client = client_for(superuser)
    assert invalid_lookup(client.get(f"{RUNS}?{query}"))
    action = {"action": "delete_selected", "index": "0", "_selected_action": [str(run.pk)]}
    assert invalid_lookup(client.post(f"{RUNS}?{query}", action))


@pytest.mark.parametrize(
    ("url", "parameter"),
    [(TASKS, "timezone"), (RUNS, "status"), (RUNS, "trigger"), (RUNS, "task")],
)
def test_a_lookup_value_holding_nul_is_an_invalid_lookup(superuser, url, parameter):
    make_run(make_task())
    # PostgreSQL refuses NUL in a text value (DataError); every database gets one answer.
    assert invalid_lookup(client_for(superuser).get(f"{url}?{parameter}=a%00b"))


@pytest.mark.parametrize(("model", "field"), [("run", "task"), ("run", "process")])
def test_an_autocomplete_term_holding_nul_finds_nothing(superuser, model, field):
    make_run(make_task())
    query = f"app_label=django_posixcron&model_name={model}&field_name={field}&term=a%00b"
    response = client_for(superuser).get(f"{reverse('admin:autocomplete')}?{query}")
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_the_run_search_of_a_term_holding_nul_finds_nothing(superuser, rf):
    # An autocomplete on runs (a project's own model pointing at Run) passes the term on as
    # it came: the run admin's own search must not send NUL to PostgreSQL (DataError).
    from django.contrib import admin

    from django_posixcron.models import Run

    make_run(make_task())
    request = rf.get("/")
    request.user = superuser
    run_admin = admin.site.get_model_admin(Run)
    found, distinct = run_admin.get_search_results(request, Run.objects.all(), "a\x00b")
    assert (list(found), distinct) == ([], False)


@pytest.mark.parametrize("url", [TASKS, RUNS, PROCESSES])
def test_a_search_holding_nul_is_still_a_search(superuser, url):
    make_run(make_task())
    assert client_for(superuser).get(f"{url}?q=%00").status_code == 200


BAD_SELECTIONS = [["abc"], ["1.5"], ["\x00"], ["²"], ["1", "abc"], [TOO_LARGE], [""]]


@pytest.mark.parametrize("selected", BAD_SELECTIONS)
@pytest.mark.parametrize(
    ("url", "action"),
    [(TASKS, "pause_selected"), (RUNS, "delete_selected"), (PROCESSES, "delete_selected")],
)
def test_a_selection_that_is_not_ids_is_a_bad_request(superuser, url, action, selected):
    task = make_task()
    make_run(task)
    SchedulerProcess.objects.create(hostname="web-1", pid=4242, version="1")
    client = client_for(superuser)
    for form in (
        {"action": action, "index": "0", "_selected_action": selected},
        # The confirmation page posts the selection again, without "index".
        {"action": action, "post": "yes", "_selected_action": selected},
    ):
        assert client.post(url, form).status_code == 400
    task.refresh_from_db()
    assert not task.paused


def test_a_selection_of_ids_that_match_no_row_is_not_refused(superuser):
    task = make_task()
    form = {"action": "pause_selected", "index": "0", "_selected_action": [str(task.pk), "-1"]}
    response = client_for(superuser).post(TASKS, form)
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.paused


def test_an_action_not_offered_is_still_forbidden_whatever_the_selection(viewer):
    form = {"action": "pause_selected", "index": "0", "_selected_action": ["abc"]}
    assert client_for(viewer).post(TASKS, form).status_code == 403
