"""The metrics view's protection examples in docs/operations.rst, run as written."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.test import RequestFactory
from django.urls import path

from tests.docs.test_docs_examples import DOCS, code_blocks

pytestmark = pytest.mark.django_db


def example(marker: str) -> dict[str, Any]:
    """Execute the Python block of operations.rst that mentions `marker`; return its names."""
    (block,) = [b for b in code_blocks(DOCS / "operations.rst", "python") if marker in b]
    namespace: dict[str, Any] = {"path": path, "urlpatterns": []}
    exec(compile(block, "operations.rst", "exec"), namespace)
    return namespace


def test_the_token_example_answers_only_with_the_token(settings):
    settings.METRICS_TOKEN = "s3cret"
    metrics = example("METRICS_TOKEN")["metrics"]
    factory = RequestFactory()
    assert metrics(factory.get("/metrics/")).status_code == 403
    assert metrics(factory.get("/metrics/", HTTP_AUTHORIZATION="Bearer wrong")).status_code == 403
    ok = metrics(factory.get("/metrics/", HTTP_AUTHORIZATION="Bearer s3cret"))
    assert ok.status_code == 200
    assert b"posixcron_schedulers_alive" in ok.content


def test_the_staff_example_sends_others_to_the_login_page():
    [pattern] = example("staff_member_required")["urlpatterns"]
    request = RequestFactory().get("/metrics/")
    request.user = AnonymousUser()
    assert pattern.callback(request).status_code == 302
    request.user = User.objects.create_user("staff", is_staff=True)
    assert pattern.callback(request).status_code == 200
