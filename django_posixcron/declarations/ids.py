"""The check ids of the settings errors.

Stable: never renumber, only append (docs/settings.rst lists them).
"""

E_NOT_A_DICT = "posixcron.E001"
E_UNKNOWN_KEY = "posixcron.E002"
E_TASKS_NOT_A_DICT = "posixcron.E003"
E_BAD_NAME = "posixcron.E004"
E_TASK_NOT_A_DICT = "posixcron.E005"
E_UNKNOWN_TASK_KEY = "posixcron.E006"
E_MISSING_KEY = "posixcron.E007"
E_SCHEDULE_TYPE = "posixcron.E008"
E_CRON_SYNTAX = "posixcron.E009"
E_CALLABLE_TYPE = "posixcron.E010"
E_CALLABLE_IMPORT = "posixcron.E011"
E_NOT_CALLABLE = "posixcron.E012"
E_SIGNATURE = "posixcron.E013"
E_KWARGS_TYPE = "posixcron.E014"
E_KWARGS_JSON = "posixcron.E015"
E_TIMEZONE = "posixcron.E016"
E_RETRY_DELAY = "posixcron.E017"
E_TIMEOUT = "posixcron.E018"
E_OVERLAP = "posixcron.E019"
E_DESCRIPTION = "posixcron.E020"
E_POLL_INTERVAL = "posixcron.E021"
E_CONCURRENCY = "posixcron.E022"
E_HISTORY_DAYS = "posixcron.E023"
E_FREQUENCY = "posixcron.E024"
E_USE_TZ = "posixcron.E025"
E_NOT_PLAIN_FUNCTION = "posixcron.E026"
E_TAKES_CONTEXT = "posixcron.E027"
E_PAUSE_AFTER = "posixcron.E028"
E_FAILING_AFTER = "posixcron.E029"
E_ENQUEUE = "posixcron.E030"
E_START_DEADLINE = "posixcron.E031"
E_TASKS_MISSING = "posixcron.E032"
E_UNKNOWN_BACKEND = "posixcron.E033"
E_DUMMY_BACKEND = "posixcron.E034"
E_UNSUPPORTED_OPTION = "posixcron.E035"
# A value whose own code raised while the checks looked at it (a property, a lazy string).
E_UNCHECKABLE = "posixcron.E037"  # (E036 is checks.py's, for the database alias)

# A warning, not an error: the declaration stays valid (checks.py reports it).
W_UNCHECKED_SIGNATURE = "posixcron.W003"  # (W001 is checks.py's, W002 the hand-off's)
