"""Integrations with other packages, each behind its optional extra."""
