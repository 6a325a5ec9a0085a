#!/usr/bin/env python
"""Django's command-line utility for the example project."""

import os
import sys
from pathlib import Path

# The project is the package example_project at the root of the checkout: make that root
# importable however this script is started.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
