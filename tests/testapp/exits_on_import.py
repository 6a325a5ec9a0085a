"""A module that ends the interpreter as it is imported: posixcron.E011, not a silent exit."""

import sys

sys.exit("bye from module")


def run() -> None:  # pragma: no cover - never reached
    pass
