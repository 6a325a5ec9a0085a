"""Sphinx configuration for the django-posixcron documentation."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# autodoc imports django_posixcron.cron straight from the checkout: the engine is pure and
# never imports Django, so the docs build needs neither settings nor an installed package.
sys.path.insert(0, str(ROOT))

from django_posixcron import __version__  # noqa: E402

project = "django-posixcron"
author = "the django-posixcron developers"
copyright = f"2026, {author}"
release = __version__
version = ".".join(__version__.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
]

templates_path: list[str] = []
exclude_patterns = ["_build"]

html_theme = "furo"
html_title = f"django-posixcron {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

# No intersphinx: the build must pass offline (CI, tox) and with -W a failed inventory fetch
# would be an error.
