"""Create (or reset) the demo admin login; development only."""

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

USERNAME = "admin"
PASSWORD = "admin"  # a demo login, printed on purpose: development only
# Marks the user as the demo's own: a user called admin that the demo did not create (the
# demo pointed at a project's database through an inherited DATABASE_URL) is left alone.
DEMO_EMAIL = "admin@example.invalid"


class Command(BaseCommand):
    help = "Create the demo superuser admin/admin, or reset its password (development only)."

    def handle(self, *args: Any, **options: Any) -> None:
        user, created = get_user_model().objects.get_or_create(
            username=USERNAME, defaults={"email": DEMO_EMAIL}
        )
        if not created and user.email != DEMO_EMAIL:
            self.stdout.write(
                f"A user {USERNAME!r} that the demo did not create exists in this database: "
                "left as it is. Log in with its own password, or point DATABASE_URL at a "
                "database of the demo's own."
            )
            return
        user.is_staff = True
        user.is_superuser = True
        user.set_password(PASSWORD)
        user.save()
        verb = "Created" if created else "Reset"
        self.stdout.write(f"{verb} the demo admin login: {USERNAME} / {PASSWORD}")
