"""Create (or reset) the demo admin login; development only."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

USERNAME = "admin"
PASSWORD = "admin"  # a demo login, printed on purpose: development only


class Command(BaseCommand):
    help = "Create the demo superuser admin/admin, or reset its password (development only)."

    def handle(self, *args: Any, **options: Any) -> None:
        user, created = get_user_model().objects.get_or_create(
            username=USERNAME, defaults={"email": "admin@example.invalid"}
        )
        user.is_staff = True
        user.is_superuser = True
        user.set_password(PASSWORD)
        user.save()
        verb = "Created" if created else "Reset"
        self.stdout.write(f"{verb} the demo admin login: {USERNAME} / {PASSWORD}")
