"""System checks: every problem in ``settings.POSIXCRON`` as a ``posixcron.E0NN`` error."""

from __future__ import annotations

from typing import Any

from django.core import checks


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Return one error per problem in the settings, all at once."""
    from django_posixcron.declarations import collect

    _, problems = collect()
    # obj=None like Django's own settings checks: the message names the settings path itself.
    return [checks.Error(p.msg, hint=p.hint, obj=None, id=p.id) for p in problems]
