"""What a reconciliation allocated and freed goes back to the system (glibc's malloc_trim)."""

from __future__ import annotations

import sys

import pytest

from django_posixcron.scheduling import memory

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or memory.release_freed_memory() is False,
    reason="this C library has no malloc_trim: freed heap pages stay with the process",
)

CHUNK = 4000  # above pymalloc's 512 bytes: from malloc's heap, as libpq's results and big lists
COUNT = 16_384  # 64 MiB
PINNED_EVERY = 16


def resident_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def test_the_heap_pages_freed_between_live_objects_are_returned():
    # One chunk in 16 stays alive, as a long-lived object allocated amid start-up's garbage:
    # free() then only ever gives back the top of the heap, and the freed pages between the
    # survivors stay resident until trimmed.
    chunks = [bytes(CHUNK) for _ in range(COUNT)]
    pinned = chunks[::PINNED_EVERY]
    del chunks
    freed_kib = CHUNK * COUNT * (PINNED_EVERY - 1) // PINNED_EVERY // 1024
    before = resident_kib()

    assert memory.release_freed_memory() is True

    returned = before - resident_kib()
    assert returned >= freed_kib // 2, (returned, freed_kib)
    assert len(pinned) == COUNT // PINNED_EVERY


class Looked:
    """A class whose attributes are looked up by names made at run time."""


ARENA_STRINGS = 16_384  # 60-byte strings: about one of the object allocator's 1 MiB arenas
ARENAS = 48


def test_names_left_in_the_type_cache_do_not_keep_freed_arenas_resident():
    # Amid each arena's worth of short-lived strings, one is used as an attribute name on a
    # class (as Django's compiler does with "as_" + vendor), and CPython's type cache keeps
    # it: every arena then stays resident for one string, after everything else is freed.
    before = resident_kib()
    batches = []
    for arena in range(ARENAS):
        batch = [f"as_{arena:04d}_{i:06d}_" + "x" * 36 for i in range(ARENA_STRINGS)]
        getattr(Looked, batch[-1], None)
        batches.append(batch)
    grown = resident_kib() - before
    del batches, batch

    memory.release_freed_memory()

    kept = resident_kib() - before
    assert grown > 32 * 1024, grown  # the strings were resident
    assert kept < grown // 4, (kept, grown)
