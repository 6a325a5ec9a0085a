"""A project's own catalogue translates the app (admin.rst, "Translations"): built here as a
project builds one, with `makemessages` over the app's sources and `msgfmt`."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.test import override_settings
from django.urls import reverse
from django.utils import translation

import django_posixcron
from django_posixcron.admin.display import duration, elapsed, relative
from tests.admin.conftest import client_for, make_task

pytestmark = pytest.mark.django_db

GERMAN = {
    "in %(delta)s": "in %(delta)s",
    "%(delta)s ago": "vor %(delta)s",
    "for %(elapsed)s": "seit %(elapsed)s",
    "Paused %(task)s.": "%(task)s pausiert.",
}
# Not the app's to translate (a History entry), but a project's catalogue may hold it.
ELSEWHERE = {"Paused.": "Pausiert."}


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LOCALE_PATHS holding a German catalogue of the app's own strings."""
    if not (shutil.which("xgettext") and shutil.which("msgfmt")):
        pytest.skip("GNU gettext (xgettext, msgfmt) is not installed")
    root = tmp_path_factory.mktemp("catalogue")
    app = root / "django_posixcron"
    shutil.copytree(
        Path(django_posixcron.__file__).parent,
        app,
        ignore=shutil.ignore_patterns("__pycache__", "static"),
    )
    (app / "locale").mkdir()
    subprocess.run(
        [sys.executable, "-m", "django", "makemessages", "-l", "de", "-v", "0"],
        cwd=app,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
    )
    po = app / "locale" / "de" / "LC_MESSAGES" / "django.po"
    text = po.read_text()
    for english, german in GERMAN.items():
        entry = f'msgid "{english}"\nmsgstr ""\n'
        assert entry in text, f"{english!r} is not extracted by makemessages"
        text = text.replace(entry, f'msgid "{english}"\nmsgstr "{german}"\n')
    for english, german in ELSEWHERE.items():
        if f'msgid "{english}"\n' not in text:
            text += f'\nmsgid "{english}"\nmsgstr "{german}"\n'
    po.write_text(text)
    subprocess.run(["msgfmt", "-o", str(po.with_suffix(".mo")), str(po)], check=True)
    return app / "locale"


def test_the_relative_times_are_translated_by_a_project_catalogue(catalogue):
    # Given to gettext() as a variable, these phrases were never extracted: "vor 5 Minuten"
    # beside "4 minutes ago" in one column.
    now = dt.datetime(2086, 1, 7, 10, 0, tzinfo=dt.UTC)
    with override_settings(LOCALE_PATHS=[str(catalogue)]), translation.override("de"):
        assert relative(now - dt.timedelta(minutes=5), now) == "vor 5\xa0Minuten"
        assert elapsed(now - dt.timedelta(minutes=3), now) == "seit 3\xa0Minuten"


def test_short_durations_use_the_languages_decimal_separator():
    # "0.47 s" in a German page, whose other numbers read "10.000" for ten thousand.
    with translation.override("de"):
        assert duration(dt.timedelta(milliseconds=470)) == "0,47 s"
    with translation.override("en"):
        assert duration(dt.timedelta(milliseconds=470)) == "0.47 s"


def test_the_history_entry_is_stored_in_english_whoever_acts(superuser, catalogue):
    # Django shows a plain text History entry as stored: translated for the operator who
    # paused, it read in their language to everyone after.
    task = make_task()
    url = reverse("admin:django_posixcron_task_pause", args=[task.pk])
    with override_settings(LOCALE_PATHS=[str(catalogue)]), translation.override("de"):
        response = client_for(superuser).post(url, HTTP_ACCEPT_LANGUAGE="de", follow=True)
    assert response.status_code == 200
    assert list(LogEntry.objects.values_list("change_message", flat=True)) == ["Paused."]
    # The operator's own message is in their language.
    # (the admin capitalises each message's first letter)
    assert f"{task.name.capitalize()} pausiert." in response.content.decode()


def test_the_task_states_are_not_taken_from_djangos_own_catalogue():
    # Django's catalogue translates a bare "active" (a user's): "Aktiv" beside an English
    # "paused" in a language this app has no catalogue for.
    from django_posixcron.admin.display import STATE_LABELS

    with translation.override("de"):
        assert translation.gettext("active") != "active"  # Django's own, for its users
        assert [str(label) for label in STATE_LABELS.values()] == ["active", "paused", "retired"]
