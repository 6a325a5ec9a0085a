"""The one exception the engine raises for a bad expression."""

from __future__ import annotations

_SHOWN = 60  # longest token quoted in a message; .token always keeps the whole text


class CronSyntaxError(ValueError):
    """A cron expression that is not strict POSIX, or that can never fire.

    ``field`` is ``"minute"``, ``"hour"``, ``"day-of-month"``, ``"month"``, ``"day-of-week"`` or
    ``"expression"`` (for problems with the whole text); ``token`` is the offending text and
    ``reason`` the rule it breaks, with the POSIX spelling to use where there is one.
    """

    def __init__(self, field: str, token: str, reason: str) -> None:
        self.field = field
        self.token = token
        self.reason = reason
        shown = token if len(token) <= _SHOWN else token[:_SHOWN] + "..."
        super().__init__(f"Bad {field} {shown!r}: {reason}")

    def __reduce__(self) -> tuple[type[CronSyntaxError], tuple[str, str, str]]:
        return (type(self), (self.field, self.token, self.reason))
