"""The operators' view: tasks, their state and history; pause, resume and run now.

tasks.py    the task list and page
actions.py  pause, resume and run now (buttons and list actions); deleting runs in batches
runs.py     the run history
processes.py  the scheduler processes
display.py  times, durations and badges; the clock the admin reads
filters.py  the list filters
permissions.py  who may see the pages and post the actions
lookups.py  ids and lookups taken from a request, refused when no database can run them
"""

from django_posixcron.admin.processes import SchedulerProcessAdmin
from django_posixcron.admin.runs import RunAdmin
from django_posixcron.admin.tasks import TaskAdmin

__all__ = ["RunAdmin", "SchedulerProcessAdmin", "TaskAdmin"]
