"""A router that sends the app's models (and the test app's) to the "cron" alias."""

from __future__ import annotations

from typing import Any

ROUTED = {"django_posixcron", "testapp"}


class CronRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return "cron" if model._meta.app_label in ROUTED else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return "cron" if model._meta.app_label in ROUTED else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label in ROUTED:
            return db == "cron"
        return None
