"""The pure POSIX cron engine: standard library only, no Django import."""

from django_posixcron.cron.errors import CronSyntaxError
from django_posixcron.cron.expression import CronExpression

__all__ = ["CronExpression", "CronSyntaxError"]
