from django.db import models


class Hit(models.Model):
    """A row written by task code itself, so tests count executions, not only Run rows."""

    task_name = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.task_name} {self.label}".strip()
