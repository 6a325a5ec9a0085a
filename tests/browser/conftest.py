"""A real Chromium (Debian's, by executable path) driving the admin on a live server."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TIMEOUT_MS = 10_000
PASSWORD = "correct horse battery staple"


def chromium_path() -> str | None:
    """Return the Chromium to drive: $POSIXCRON_CHROMIUM, else Debian's, else None."""
    candidate = os.environ.get("POSIXCRON_CHROMIUM") or "/usr/bin/chromium"
    return shutil.which(candidate)


def _unavailable(reason: str) -> None:
    # CI installs Chromium and sets POSIXCRON_REQUIRE_BROWSER=1: a missing browser there is a
    # broken job, not a reason to go green without the browser tests.
    if os.environ.get("POSIXCRON_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (POSIXCRON_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Launch one headless Chromium per module."""
    executable = chromium_path()
    if executable is None:
        _unavailable(
            "Chromium not found: install Debian's chromium (apt-get install chromium) or set "
            "POSIXCRON_CHROMIUM to its path"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is in the dev requirements
        _unavailable("playwright is not installed")
    # Playwright's sync API runs an event loop in the test thread; Django then refuses ORM
    # calls there (SynchronousOnlyOperation) although nothing is async. Allowed only while a
    # browser module runs, so the rest of the suite keeps Django's guard.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=CHROMIUM_ARGS
            )
            try:
                yield browser
            finally:
                browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="session")
def live_server(django_db_setup: None, live_server: Any) -> Any:
    """Start pytest-django's live server only after the test database exists.

    Otherwise the server starts while SQLite's NAME is still ":memory:", shares the main
    thread's connection with every request thread, and concurrent requests crash sqlite3.
    """
    return live_server


@pytest.fixture
def admin_user(transactional_db: None) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_superuser("operator", "operator@example.com", PASSWORD)


@pytest.fixture
def page(browser: Any, live_server: Any, admin_user: Any) -> Iterator[Any]:
    """Return a page logged in to the admin through its login form."""
    from playwright.sync_api import expect

    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1400, "height": 900}, locale="en-US"
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.goto("/admin/login/?next=/admin/")
    page.fill("#id_username", admin_user.username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(admin_user.username)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
