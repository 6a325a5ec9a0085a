"""Receivers a test connects for the length of a fixture."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import Model
from django.db.models.signals import post_init
from django.dispatch import Signal


def post_init_seen(request: pytest.FixtureRequest, model: type[Model]) -> Iterator[list[Any]]:
    """Yield the instances of `model` a post_init receiver was sent, when the fixture's param
    is "a post_init receiver"; with "nobody listening", none is connected."""
    seen: list[Any] = []

    def receiver(sender: type[Model], instance: Model, **kwargs: Any) -> None:
        seen.append(instance)

    if request.param == "a post_init receiver":
        post_init.connect(receiver, sender=model, weak=False)
    yield seen
    post_init.disconnect(receiver, sender=model)


@contextlib.contextmanager
def blocking_receiver(signal: Signal) -> Iterator[threading.Event]:
    """Connect a receiver of `signal` that blocks (a slow notify() over the network) until the
    block ends; yield the event it sets when a signal first reaches it."""
    entered, release = threading.Event(), threading.Event()

    def receiver(sender: object, **kwargs: Any) -> None:
        entered.set()
        release.wait(30)

    signal.connect(receiver, weak=False)
    try:
        yield entered
    finally:
        release.set()
        signal.disconnect(receiver)
