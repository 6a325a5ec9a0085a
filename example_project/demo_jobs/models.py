"""A table the demo tasks really write to."""

from django.db import models


class Heartbeat(models.Model):
    """One row per minute from the heartbeat task: proof the scheduler is alive."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()

    objects: models.Manager["Heartbeat"] = models.Manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} from {self.host}:{self.pid}"
