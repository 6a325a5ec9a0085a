"""What each live scheduler declares, so several declaration sets can be live at once.

"Several declaration sets can be live at once (a rolling deploy, a canary, a rollback, hosts
with different settings). Each scheduler records what it declares with its process row."

A process stores its set once, as {task name: definition hash} under the set's digest, and
names the digest on its process row: the processes of one deploy share one row, so tens of
processes running two versions of 10,000 tasks store two maps, and reading the live peers is
two small queries.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence

from django.db import IntegrityError, transaction
from django.utils import timezone as dj_timezone

from django_posixcron.models import DeclarationSet, SchedulerProcess

# Sets never change under a digest, so the maps read once are kept; a process sees a handful.
_SETS_CACHED = 16
_cache: dict[str, Mapping[str, str]] = {}


@dataclasses.dataclass(frozen=True)
class Peer:
    """Live processes that declare one set: their labels and the set's hashes."""

    digest: str
    labels: tuple[str, ...]
    hashes: Mapping[str, str]


def digest_of(hashes: Mapping[str, str]) -> str:
    """Return the digest that names a set of {task name: definition hash}."""
    text = "\n".join(f"{name}\t{hashes[name]}" for name in sorted(hashes))
    return hashlib.sha256(text.encode()).hexdigest()


def record(using: str, hashes: Mapping[str, str]) -> str:
    """Store the set unless it is stored already; return its digest."""
    digest = digest_of(hashes)
    sets = DeclarationSet.objects.using(using)
    # Touched when found, so that pruning (which spares sets recorded within a day) never
    # deletes the set of a process that is registering.
    if not sets.filter(digest=digest).update(created_at=dj_timezone.now()):
        try:
            with transaction.atomic(using=using):
                sets.create(digest=digest, hashes=dict(hashes))
        except IntegrityError:
            pass  # another process of the same deploy stored it first
    return digest


def _hashes(using: str, digests: Iterable[str]) -> dict[str, Mapping[str, str]]:
    """Return the stored set of each digest, from the cache or the database.

    Every set asked for is answered, wherever it came from: when a new set filled the cache,
    the cache was emptied and only the new set read back, so the live processes whose sets
    had been cached dropped out of the answer, and a reconciliation rewrote or retired what
    they still declared (a long-lived process that had seen sixteen sets). The cache is
    shared by the admin's threads: read with get(), never a lookup after a test.
    """
    found: dict[str, Mapping[str, str]] = {}
    wanted = []
    for digest in digests:
        cached = _cache.get(digest)
        if cached is None:
            wanted.append(digest)
        else:
            found[digest] = cached
    if wanted:
        if len(_cache) + len(wanted) > _SETS_CACHED:
            _cache.clear()
        rows = DeclarationSet.objects.using(using).filter(digest__in=wanted)
        for digest, hashes in rows.values_list("digest", "hashes"):
            _cache[digest] = found[digest] = hashes
    return found


def live_processes(
    using: str, now: dt.datetime, stale_after: dt.timedelta, exclude: int | None = None
) -> list[tuple[str, str]]:
    """Return (label, digest) of each live process that recorded a set, but `exclude`."""
    rows = SchedulerProcess.objects.using(using).live(now, stale_after).exclude(declaration_set="")
    if exclude is not None:
        rows = rows.exclude(pk=exclude)
    return [
        (f"{host}:{pid}", digest)
        for host, pid, digest in rows.order_by("hostname", "pid").values_list(
            "hostname", "pid", "declaration_set"
        )
    ]


def live_digests(
    using: str, now: dt.datetime, stale_after: dt.timedelta, exclude: int | None = None
) -> set[str]:
    """Return the digests live processes declare: one small query, for the loop's re-check."""
    rows = SchedulerProcess.objects.using(using).live(now, stale_after)
    if exclude is not None:
        rows = rows.exclude(pk=exclude)
    return set(rows.exclude(declaration_set="").values_list("declaration_set", flat=True))


def live_peers(
    using: str, now: dt.datetime, stale_after: dt.timedelta, exclude: int | None = None
) -> list[Peer]:
    """Return the live processes (but `exclude`) grouped by the set they declare."""
    labels: dict[str, list[str]] = {}
    for label, digest in live_processes(using, now, stale_after, exclude):
        labels.setdefault(digest, []).append(label)
    hashes = _hashes(using, labels)
    return [
        Peer(digest, tuple(labels[digest]), hashes[digest])
        for digest in sorted(labels)
        if digest in hashes
    ]


@dataclasses.dataclass(frozen=True)
class Pending:
    """A task whose live schedulers disagree about its definition: a change not applied yet.

    `stored` is the stored definition hash (None when the task is retired or has no row);
    `versions` maps each declared hash (None: not declared) to the processes declaring it.
    """

    name: str
    stored: str | None
    versions: Mapping[str | None, tuple[str, ...]]

    @property
    def holders(self) -> tuple[str, ...]:
        """Return the live processes that declare the stored version and hold the change."""
        return self.versions.get(self.stored, ())

    @property
    def waiting(self) -> dict[str | None, tuple[str, ...]]:
        """Return the versions waiting to be applied, with the processes declaring them."""
        return {h: labels for h, labels in self.versions.items() if h != self.stored}

    def describe(self) -> str:
        def short(version: str | None) -> str:
            return "not declared" if version is None else version[:12]

        waiting = "; ".join(
            f"{short(version)} by {', '.join(labels)}" for version, labels in self.waiting.items()
        )
        holders = ", ".join(self.holders) or "no live process"
        if self.stored is None:
            # Retired (or never stored): the processes that hold that are those without it.
            holders = f" (not declared by {', '.join(self.holders)})" if self.holders else ""
            return f"{self.name}: retired{holders}; waiting: {waiting}"
        return f"{self.name}: stored {short(self.stored)} held by {holders}; waiting: {waiting}"


def pending_changes(rows: Iterable[tuple[str, str, bool]], peers: Sequence[Peer]) -> list[Pending]:
    """Return the tasks whose live processes declare something else than is stored; pure.

    `rows` are (name, definition hash, declared) of the Task table.
    """
    stored: dict[str, str | None] = {
        name: (definition_hash if declared else None) for name, definition_hash, declared in rows
    }
    names = {n for n, h in stored.items() if h is not None}
    for peer in peers:
        names.update(peer.hashes)
    result = []
    for name in sorted(names):
        versions: dict[str | None, tuple[str, ...]] = {}
        for peer in peers:
            version = peer.hashes.get(name)
            versions[version] = versions.get(version, ()) + peer.labels
        current = stored.get(name)
        if set(versions) - {current}:
            result.append(Pending(name, current, versions))
    return result
