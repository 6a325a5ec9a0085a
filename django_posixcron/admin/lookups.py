"""What the lists take from a request: ids a row can have, lookups a database can run."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import SEARCH_VAR
from django.http import HttpRequest

# The primary keys are BigAutoFields. A number past them matches no row, yet SQLite's driver
# raises OverflowError binding it; and str.isdigit() and int() take digits of other scripts,
# isdigit() even '²', which int() then refuses.
_PK = re.compile(r"-?[0-9]{1,19}")
PK_RANGE = range(-(2**63), 2**63)


def as_pk(value: str) -> int | None:
    """Return `value` as a primary key, or None if no row can have it."""
    if not _PK.fullmatch(value):
        return None
    pk = int(value)
    return pk if pk in PK_RANGE else None


def checked_changelist(request: HttpRequest, build: Callable[[HttpRequest], Any]) -> Any:
    """Return `build(request)` (Django's change list), or raise IncorrectLookupParameters for
    a query string it cannot run: Django answers that with the plain list and "?e=1"."""
    for name, values in request.GET.lists():
        # PostgreSQL refuses NUL in a text value (DataError). The search is no lookup: Django
        # quotes each term, and it finds nothing.
        if name != SEARCH_VAR and any("\x00" in value for value in values):
            raise IncorrectLookupParameters(name)
    try:
        return build(request)
    except (ValueError, OverflowError) as exc:
        # Django bounds a date drill-down unguarded: year=9999 asks for the start of 10000,
        # year=2147483648 overflows the date itself.
        raise IncorrectLookupParameters(exc) from exc
