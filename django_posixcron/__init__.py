"""Cron-scheduled Python callables for Django, declared in settings, run exactly once."""

__version__ = "0.1.0.dev0"
