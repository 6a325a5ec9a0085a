"""Give back to the operating system what a reconciliation allocated and freed.

Reconciling reads a row per declared task and plans from them; once it is done those objects
are freed, but glibc's allocator keeps the freed pages of its heap for later allocations, and
a long-running scheduler never makes that many again: at 100,000 tasks they were 18 MiB of
its resident size for its whole life. ``malloc_trim(0)`` returns them. C libraries without it
(musl, macOS, Windows) keep them; there only Python's own allocator gives back what it can.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)  # the process's own symbols, the C library's among them
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, TypeError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]  # type: ignore[attr-defined]
    trim.restype = ctypes.c_int  # type: ignore[attr-defined]
    return trim


def _forget_attribute_names() -> None:
    """Drop the names CPython's type attribute cache holds on to.

    Each lookup of an attribute on a class (Django builds names such as ``"as_" + vendor``
    for every expression it compiles) may leave its name in that cache, which keeps the
    string alive. A few hundred such names, allocated amid a reconciliation's rows, each kept
    a whole 1 MiB arena of the object allocator resident after everything around them was
    freed: 100 MiB after rewriting 100,000 tasks. Clearing the cache frees those arenas; it
    refills on the next lookups.
    """
    clear = getattr(sys, "_clear_internal_caches", None) or getattr(sys, "_clear_type_cache", None)
    if clear is not None:
        clear()


def release_freed_memory() -> bool:
    """Return the allocator's free heap pages to the system; False where that cannot be done.

    Python's object allocator gives back its arenas itself once they are empty; the names
    the type cache keeps are dropped first so that more of them are.
    """
    _forget_attribute_names()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
