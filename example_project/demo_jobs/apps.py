from django.apps import AppConfig


class DemoJobsConfig(AppConfig):
    name = "example_project.demo_jobs"
    verbose_name = "Demo jobs"
    default_auto_field = "django.db.models.BigAutoField"
