"""The package as users install it: migrations current, metadata in one place."""

from __future__ import annotations

import tomllib
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

import django_posixcron

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_are_current_on_this_database():
    out = StringIO()
    # Exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    assert "No changes detected" in out.getvalue()


def test_version_lives_in_one_place():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "django_posixcron.__version__"
    }
    assert django_posixcron.__version__


def test_package_is_typed():
    assert (Path(django_posixcron.__file__).parent / "py.typed").exists()


def test_supported_django_versions_are_declared():
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
    for version in ("5.2", "6.0", "6.1"):
        assert f"Framework :: Django :: {version}" in classifiers
