"""Reconciling as a registered scheduler, beside live peers that declare other sets."""

from __future__ import annotations

import logging

import pytest
from django.core.management import call_command

from django_posixcron.models import DeclarationSet, SchedulerProcess, Task
from django_posixcron.scheduling.liveness import mark_stopped
from tests.reconcile.test_deferral import V1, V2

pytestmark = pytest.mark.django_db(transaction=True)


def hashes() -> dict[str, tuple[str, bool]]:
    return {t.name: (t.definition_hash, t.declared) for t in Task.objects.all()}


def test_deferred_until_the_holder_stops_then_applied_by_the_loop(make_scheduler, caplog, capsys):
    caplog.set_level(logging.INFO, logger="django_posixcron")
    old = make_scheduler(declarations=V1)
    old.reconcile()
    new = make_scheduler(declarations=V2)
    result = new.reconcile()

    # Both sets are recorded once, and named by the process rows.
    assert DeclarationSet.objects.count() == 2
    assert {p.declaration_set for p in SchedulerProcess.objects.all()} == {
        old.process.declaration_set,
        new.process.declaration_set,
    }
    assert [c.task.name for c in result.create] == ["b"]
    assert [d.name for d in result.deferred] == ["a"]
    assert hashes()["a"] == (V1["a"].definition_hash, True)

    # An old process re-planning while the new one is live reverts and retires nothing.
    assert old.reconcile().is_empty
    assert hashes()["b"] == (V2["b"].definition_hash, True)

    # Logged once, however often the process plans again.
    new.reconcile()
    deferred = [r for r in caplog.records if getattr(r, "action", None) == "task_deferred"]
    assert sorted(r.task for r in deferred) == ["a", "b"]

    call_command("schedulerstatus", "--ignore-overdue", "--ignore-failing")
    out = capsys.readouterr().out
    assert "Deferred definition changes: 2" in out
    assert f"deferred  a: stored {V1['a'].definition_hash[:12]} held by" in out

    new.tick()  # notes who is live
    mark_stopped(old.using, old.process)
    new.tick()
    assert hashes()["a"] == (V2["a"].definition_hash, True)
    assert any(getattr(r, "action", None) == "declarations_gone" for r in caplog.records)
    # The stored definition is ours now: the claimer no longer leaves it out.
    assert new.claimer.mismatched == {}


def test_a_canary_taken_away_has_its_extra_task_retired(make_scheduler):
    main = make_scheduler(declarations=V1)
    main.reconcile()
    canary = make_scheduler(declarations=V2)
    canary.reconcile()
    main.tick()
    assert hashes()["b"][1]

    mark_stopped(canary.using, canary.process)
    main.tick()
    assert hashes() == {
        "a": (V1["a"].definition_hash, True),
        "b": (V2["b"].definition_hash, False),
        "c": (V1["c"].definition_hash, True),
    }
