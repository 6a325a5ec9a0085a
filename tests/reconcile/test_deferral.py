"""plan() with live peers: which changes apply and which defer; pure, no database.

"A process creates what is new to the database, but never retires or rewrites a definition
that another live scheduler declares differently: it defers that change [...] and applies it
as soon as no live process holds the other version."
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from django_posixcron.declarations import TaskDeclaration
from django_posixcron.deployments import Peer, Pending, digest_of, pending_changes
from django_posixcron.models import Task
from django_posixcron.reconcile import Plan, plan
from tests.harness.declaring import NOW, declare, task

NAMES = ("a", "b", "c", "d")
VERSIONS = ("v1", "v2", "v3")


def declared(versions: Mapping[str, str]) -> dict[str, TaskDeclaration]:
    """Return declarations of every-minute tasks whose definition differs by `version`."""
    return declare(**{name: task("* * * * *", description=v) for name, v in versions.items()})


def peer(label: str, declarations: Mapping[str, TaskDeclaration]) -> Peer:
    hashes = {name: d.definition_hash for name, d in declarations.items()}
    return Peer(digest_of(hashes), (label,), hashes)


def applied(rows: dict[str, Task], result: Plan) -> dict[str, Task]:
    """Return the rows after writing `result`, as apply() would."""
    after = dict(rows)
    for change in result.changes:
        after[change.task.name] = copy.copy(change.task)
    return after


def rows_of(declarations: Mapping[str, TaskDeclaration]) -> dict[str, Task]:
    return applied({}, plan(declarations, [], NOW))


V1 = declared({"a": "v1", "c": "v1"})
V2 = declared({"a": "v2", "b": "v2", "c": "v1"})


def test_a_new_deploy_creates_what_is_new_and_defers_what_the_old_one_holds():
    rows = rows_of(V1)
    result = plan(V2, rows.values(), NOW, [peer("old:1", V1), peer("old:2", V1)])
    assert [c.task.name for c in result.create] == ["b"]
    assert result.update == []
    assert result.retire == []
    (deferred,) = result.deferred
    assert deferred.name == "a"
    assert deferred.stored_hash == V1["a"].definition_hash
    assert deferred.wanted_hash == V2["a"].definition_hash
    assert deferred.holders == ("old:1", "old:2")
    assert deferred.line.startswith("deferred task 'a': its definition ")
    assert result.summary() == (
        "Reconciled 3 declared tasks: 1 created, 0 updated, 0 restored, 0 retired, "
        "1 unchanged, 1 deferred."
    )  # the declared tasks add up: 1 created + 1 unchanged + 1 deferred


def test_an_old_process_restarting_mid_rollout_reverts_and_retires_nothing():
    rows = applied(rows_of(V1), plan(V2, rows_of(V1).values(), NOW))  # v2 already applied
    result = plan(V1, rows.values(), NOW, [peer("new:1", V2)])
    assert result.is_empty
    assert {(d.name, d.wanted_hash) for d in result.deferred} == {
        ("a", V1["a"].definition_hash),
        ("b", None),
    }
    assert "retiring it" in next(d.line for d in result.deferred if d.name == "b")
    # Only the tasks declared here add up to the declared count; "b" is not one of them.
    assert result.summary() == (
        "Reconciled 2 declared tasks: 0 created, 0 updated, 0 restored, 0 retired, "
        "1 unchanged, 1 deferred, 1 retirement deferred."
    )


def test_the_change_applies_once_no_live_process_holds_the_stored_version():
    rows = rows_of(V1)
    result = plan(V2, rows.values(), NOW, [])
    assert [c.task.name for c in result.update] == ["a"]
    assert result.deferred == []


def test_a_peer_declaring_our_version_or_a_third_one_holds_nothing():
    rows = rows_of(V1)
    v3 = declared({"a": "v3", "c": "v1"})
    result = plan(V2, rows.values(), NOW, [peer("new:2", V2), peer("canary:1", v3)])
    assert [c.task.name for c in result.update] == ["a"]
    assert result.deferred == []


def test_a_retired_task_that_we_declare_is_restored_whatever_peers_declare():
    rows = applied(rows_of(V2), plan(V1, rows_of(V2).values(), NOW))  # b retired
    assert not rows["b"].declared
    result = plan(V2, rows.values(), NOW, [peer("old:1", V1)])
    assert [c.action for c in result.update if c.task.name == "b"] == ["task_restored"]


def test_pending_changes_name_the_holders_and_the_waiting_versions():
    rows = [(t.name, t.definition_hash, t.declared) for t in rows_of(V1).values()]
    pending = pending_changes(rows, [peer("old:1", V1), peer("new:1", V2)])
    assert [p.name for p in pending] == ["a", "b"]
    a, b = pending
    assert a.holders == ("old:1",)
    assert a.waiting == {V2["a"].definition_hash: ("new:1",)}
    assert b.stored is None
    assert b.waiting == {V2["b"].definition_hash: ("new:1",)}
    assert a.describe().startswith(f"a: stored {V1['a'].definition_hash[:12]} held by old:1")


# -- properties over random fleets -------------------------------------------------------------

version_sets = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VERSIONS), min_size=1)


@dataclasses.dataclass
class Process:
    label: str
    declarations: dict[str, TaskDeclaration]
    last: Plan | None = None
    # The other sets live when it last looked (Rollout.peer_sets).
    seen: set[str] = dataclasses.field(default_factory=set)

    @property
    def as_peer(self) -> Peer:
        return peer(self.label, self.declarations)


class Fleet:
    """Processes reconciling against one table, as the scheduler's re-check drives them."""

    def __init__(self) -> None:
        self.rows: dict[str, Task] = {}
        self.live: list[Process] = []

    def reconcile(self, process: Process) -> None:
        peers = [p.as_peer for p in self.live if p is not process]
        process.last = plan(process.declarations, self.rows.values(), NOW, peers)
        self._check_never_taken_from_peers(process.last, peers)
        self.rows = applied(self.rows, process.last)
        process.seen = self._others(process)

    def _others(self, process: Process) -> set[str]:
        return {p.as_peer.digest for p in self.live} - {process.as_peer.digest}

    def start(self, label: str, versions: Mapping[str, str]) -> None:
        process = Process(label, declared(versions))
        self.live.append(process)
        self.reconcile(process)

    def stop(self, index: int) -> None:
        del self.live[index % len(self.live)]

    def settle(self) -> None:
        """Re-reconcile every process that saw a set go, until quiet (Rollout.peers_changed)."""
        for _ in range(10):
            waiting = []
            for process in self.live:
                live = self._others(process)
                if process.seen - live:
                    waiting.append(process)
                process.seen = live
            if not waiting:
                return
            for process in waiting:
                self.reconcile(process)
        raise AssertionError("the fleet did not settle")

    def _check_never_taken_from_peers(self, result: Plan, peers: list[Peer]) -> None:
        """Assert that nothing a live peer declares as stored is retired or rewritten."""
        for change in result.retire:
            assert not any(change.task.name in p.hashes for p in peers), change.line
        for change in result.update:
            before = self.rows[change.task.name]
            if change.action == "task_updated" and "definition_hash" in change.fields:
                held = [p for p in peers if p.hashes.get(before.name) == before.definition_hash]
                assert not held, change.line


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    first=version_sets,
    events=st.lists(
        st.one_of(
            st.tuples(st.just("start"), version_sets),
            st.tuples(st.just("stop"), st.integers(0, 5)),
        ),
        max_size=8,
    ),
)
def test_any_rollout_keeps_every_declared_task_firing_and_converges(first, events):
    fleet = Fleet()
    fleet.start("p0", first)
    for number, (kind, value) in enumerate(events, start=1):
        if kind == "start":
            fleet.start(f"p{number}", value)
        elif len(fleet.live) > 1:
            fleet.stop(value)
        fleet.settle()
        live_hashes = {
            (name, d.definition_hash) for p in fleet.live for name, d in p.declarations.items()
        }
        for process in fleet.live:
            for name in process.declarations:
                row = fleet.rows[name]
                # "A task that any live scheduler declares never stops firing": it stays
                # declared, at a version some live process declares, so someone claims it.
                assert row.declared, name
                assert (name, row.definition_hash) in live_hashes, name
        for name, row in fleet.rows.items():
            if row.declared:
                assert any(name in p.declarations for p in fleet.live), name
    # A rollback or the end of a rollout: once one declaration set is left, the table is it.
    survivor = fleet.live[0]
    fleet.live = [survivor]
    fleet.settle()
    declared_rows = {n: t.definition_hash for n, t in fleet.rows.items() if t.declared}
    assert declared_rows == {n: d.definition_hash for n, d in survivor.declarations.items()}


def test_a_retired_task_one_live_process_declares_reads_as_retired_not_as_stored():
    pending = Pending("c", None, {None: ("web:1",), "0123456789abcdef": ("canary:2",)})
    assert pending.describe() == (
        "c: retired (not declared by web:1); waiting: 0123456789ab by canary:2"
    )
    assert Pending("c", None, {"0123456789abcdef": ("canary:2",)}).describe() == (
        "c: retired; waiting: 0123456789ab by canary:2"
    )
