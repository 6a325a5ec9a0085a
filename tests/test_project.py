"""The package as users install it: migrations current, metadata in one place."""

from __future__ import annotations

import subprocess
import sys
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


def test_the_build_backend_floor_knows_the_metadata_we_use():
    """A licence given as an SPDX expression, with ``license-files``, is PEP 639: setuptools
    before 77 rejects it ("`project.license` must be valid exactly by one definition"), so a
    build that honours the declared floor (``--no-build-isolation``, a distribution's packager,
    a pinned build environment) fails on every version between the floor and 77."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    (requirement,) = pyproject["build-system"]["requires"]
    name, _, floor = requirement.partition(">=")
    assert name == "setuptools"
    assert tuple(int(part) for part in floor.split(".")) >= (77,)


def test_package_is_typed():
    assert (Path(django_posixcron.__file__).parent / "py.typed").exists()


def test_supported_django_versions_are_declared():
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["classifiers"]
    for version in ("5.2", "6.0", "6.1"):
        assert f"Framework :: Django :: {version}" in classifiers


def test_every_module_imports_in_a_project_with_only_django_and_the_app():
    """The test settings install django-health-check, which patches Django's classes to be
    subscriptable for type checkers (django-stubs-ext): a module that subscripts one at run
    time passes every test here and fails to import in a project without it."""
    script = (
        "import pkgutil, importlib, django\n"
        "from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['django.contrib.contenttypes', "
        "'django.contrib.auth', 'django.contrib.admin', 'django.contrib.messages', "
        "'django.contrib.sessions', 'django_posixcron'], "
        "DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}})\n"
        "django.setup()\n"
        "import sys, django_posixcron\n"
        "assert 'django_stubs_ext' not in sys.modules\n"
        "for info in pkgutil.walk_packages(django_posixcron.__path__, 'django_posixcron.'):\n"
        "    if '.migrations.' in info.name or info.name.endswith('contrib.health_check'):\n"
        "        continue\n"
        "    importlib.import_module(info.name)\n"
        "print('imported')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported"
