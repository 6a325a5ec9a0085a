from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PosixCronConfig(AppConfig):
    name = "django_posixcron"
    verbose_name = _("Scheduled tasks")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register checks and signal receivers only: no queries at app loading.
        from django_posixcron import checks, conf  # noqa: F401
