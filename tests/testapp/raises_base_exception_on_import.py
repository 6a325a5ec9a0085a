"""A module that raises a BaseException of its own as it is imported: posixcron.E011, not a
traceback out of `manage.py check`."""


class Abort(BaseException):
    pass


raise Abort("aborted at import")


def run() -> None:  # pragma: no cover - never reached
    pass
