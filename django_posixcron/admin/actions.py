"""Pause, resume and run now: the task page's buttons and the task list's actions.

Both call the same queryset methods (TaskQuerySet.pause, .resume, .request_run), so the rule
of what each change writes lives in one place, beside the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import model_ngettext, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from django_posixcron.admin.display import clock, live_processes, runs_of_history
from django_posixcron.db import database_now
from django_posixcron.log import get_logger
from django_posixcron.models import Overlap, Run, RunQuerySet, Task, TaskQuerySet

if TYPE_CHECKING:
    TaskAdminBase = admin.ModelAdmin[Task]
else:
    # ModelAdmin is only subscriptable at run time with django-stubs-ext's monkeypatch.
    TaskAdminBase = admin.ModelAdmin

logger = get_logger(__name__)

PAUSE_PERMISSION = "django_posixcron.pause_task"
RESUME_PERMISSION = "django_posixcron.resume_task"
RUN_PERMISSION = "django_posixcron.run_task"

# The History entries, stored as they are read: Django shows a plain text entry as stored,
# so one translated for the operator who acted read in their language to everyone after.
PAUSED = "Paused."
RESUMED = "Resumed."
REQUESTED = "Requested a run."


class TaskStateActions(TaskAdminBase):
    """The task admin's state changes, each behind its own permission; never task code."""

    actions = ("pause_selected", "resume_selected", "run_selected")

    def has_pause_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return request.user.has_perm(PAUSE_PERMISSION) and self.has_view_permission(request)

    def has_resume_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return request.user.has_perm(RESUME_PERMISSION) and self.has_view_permission(request)

    def has_run_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return request.user.has_perm(RUN_PERMISSION) and self.has_view_permission(request)

    def state_urls(self) -> list[URLPattern]:
        """Return the URLs of the task page's Pause, Resume and Run now buttons."""
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view
        return [
            path(f"<path:object_id>/{name}/", wrap(view), name="{}_{}_{}".format(*info, name))
            for name, view in (
                ("pause", self.pause_view),
                ("resume", self.resume_view),
                ("run", self.run_view),
            )
        ]

    # The task page's buttons --------------------------------------------------------------

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def change(task: Task) -> str | None:
            if not task.pause():
                self.message_user(
                    request,
                    gettext("The task %(task)s was already paused.") % {"task": task.name},
                    messages.INFO,
                )
                return None
            self._log(
                request, "Task paused from the admin task=%s user=%s", "admin_pause", task.name
            )
            self.message_user(
                request, gettext("Paused %(task)s.") % {"task": task.name}, messages.SUCCESS
            )
            return PAUSED

        return self._state_view(
            request, object_id, self.has_pause_permission, change, gettext("Pause")
        )

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def change(task: Task) -> str | None:
            if not task.resume():
                self.message_user(
                    request,
                    gettext("The task %(task)s was not paused.") % {"task": task.name},
                    messages.INFO,
                )
                return None
            self._log(
                request, "Task resumed from the admin task=%s user=%s", "admin_resume", task.name
            )
            self.message_user(
                request, gettext("Resumed %(task)s.") % {"task": task.name}, messages.SUCCESS
            )
            return RESUMED

        return self._state_view(
            request, object_id, self.has_resume_permission, change, gettext("Resume")
        )

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def change(task: Task) -> str | None:
            # Never runs task code here: the request is a timestamp a scheduler claims. The
            # conditional UPDATE says whether this request made it: one pending already (asked
            # for before, or by another request since the task was read) is the same run.
            if not task.request_run():
                live = self._scheduler_live()
                if task.paused:
                    already = gettext(
                        "A run of %(task)s is already requested; it starts once the task is "
                        "resumed."
                    )
                elif not live:
                    # The warning that no scheduler is running says when it starts.
                    already = gettext("A run of %(task)s is already requested.")
                else:
                    already = gettext(
                        "A run of %(task)s is already requested; a scheduler starts it at its "
                        "next tick."
                    )
                self.message_user(request, already % {"task": task.name}, messages.INFO)
                self._warn_no_scheduler(request, live)
                return None
            self._log(
                request, "Run requested from the admin task=%s user=%s", "admin_run_now", task.name
            )
            live = self._scheduler_live()
            if task.paused or not live:
                # A warning follows: when the run starts is for it to say.
                requested = gettext("Requested a run of %(task)s.")
            else:
                requested = gettext(
                    "Requested a run of %(task)s: a scheduler starts it at its next tick."
                )
            self.message_user(request, requested % {"task": task.name}, messages.SUCCESS)
            if task.paused:
                self.message_user(
                    request,
                    gettext("The task %(task)s is paused: its run starts once it is resumed.")
                    % {"task": task.name},
                    messages.WARNING,
                )
            elif _request_may_be_skipped(task):
                self.message_user(
                    request,
                    gettext(
                        'A run of %(task)s is still going and its overlap is "skip": the '
                        "requested run is recorded as skipped if that run has not ended when a "
                        "scheduler picks the request up."
                    )
                    % {"task": task.name},
                    messages.WARNING,
                )
            self._warn_no_scheduler(request, live)
            return REQUESTED

        return self._state_view(
            request, object_id, self.has_run_permission, change, gettext("Run now")
        )

    def _state_view(
        self,
        request: HttpRequest,
        object_id: str,
        allowed: Callable[[HttpRequest, Task | None], bool],
        change: Callable[[Task], str | None],
        button: str,
    ) -> HttpResponse:
        if request.method in ("GET", "HEAD"):
            # A button pressed after the session ended comes back here from the login page,
            # by GET: a GET changes nothing, so back to the task's page, saying so.
            if not self.has_view_permission(request):
                raise PermissionDenied
            obj = self.get_object(request, unquote(object_id))
            if obj is None:
                raise Http404
            self.message_user(
                request,
                gettext(
                    "The task %(task)s was not changed: %(button)s acts only when its button "
                    "on this page is pressed."
                )
                % {"button": button, "task": obj.name},
                messages.WARNING,
            )
            return self._task_page(obj)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not allowed(request, None):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not obj.declared:
            self._warn_retired(request, 1)
        elif (done := change(obj)) is not None:
            self.log_change(request, obj, done)
        return self._task_page(obj)

    def _task_page(self, obj: Task) -> HttpResponseRedirect:
        return HttpResponseRedirect(
            reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                args=[obj.pk],
                current_app=self.admin_site.name,
            )
        )

    # The list's actions ------------------------------------------------------------------

    @admin.action(description=_("Pause selected tasks"), permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        self._set_paused(request, queryset, paused=True)

    @admin.action(description=_("Resume selected tasks"), permissions=["resume"])
    def resume_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        self._set_paused(request, queryset, paused=False)

    def _set_paused(self, request: HttpRequest, queryset: TaskQuerySet, *, paused: bool) -> None:
        """Pause or resume the selected declared tasks; say what changed and what did not."""
        selected = list(queryset.filter(declared=True))
        now = database_now(queryset.db)
        # Pausing takes over a pause the scheduler made (pause_after_failures) too.
        targets = [
            task for task in selected if task.paused != paused or (paused and task.paused_reason)
        ]
        if paused:
            done_to = _changed(queryset, targets, lambda rows: rows.pause(now))
            changed, unchanged = len(done_to), len(selected) - len(done_to)
            log = "Task paused from the admin task=%s user=%s", "admin_pause"
            done = PAUSED
            text = ngettext("Paused %(count)d task.", "Paused %(count)d tasks.", changed)
            same = ngettext(
                "%(count)d was already paused.", "%(count)d were already paused.", unchanged
            )
        else:
            done_to = _changed(queryset, targets, lambda rows: rows.resume(now))
            changed, unchanged = len(done_to), len(selected) - len(done_to)
            log = "Task resumed from the admin task=%s user=%s", "admin_resume"
            done = RESUMED
            text = ngettext("Resumed %(count)d task.", "Resumed %(count)d tasks.", changed)
            same = ngettext("%(count)d was not paused.", "%(count)d were not paused.", unchanged)
        self._history(request, done_to, done)
        # A line per task, as from the task page: who paused `nightly-report`, and when, is
        # found by its name whichever way it was done.
        for task in done_to:
            self._log(request, *log, task.name)
        if changed:
            self.message_user(request, text % {"count": changed}, messages.SUCCESS)
        if unchanged:
            self.message_user(request, same % {"count": unchanged}, messages.INFO)
        self._warn_retired(request, queryset.retired().count())

    @admin.action(description=_("Run selected tasks now"), permissions=["run"])
    def run_selected(self, request: HttpRequest, queryset: TaskQuerySet) -> None:
        selected = list(queryset.filter(declared=True))
        # One request at a time, as the task page's button: a task whose request is still
        # pending keeps it, and nothing is logged or recorded for it a second time.
        now = database_now(queryset.db)
        targets = [t for t in selected if t.run_requested_at is None]
        done_to = _changed(queryset, targets, lambda rows: rows.request_run(now))
        # Every selected task now has a request pending, this one's or an earlier one: a paused
        # one's starts once it is resumed.
        paused = sum(t.paused for t in selected)
        running = sum(_request_may_be_skipped(t) for t in done_to)
        requested, unchanged = len(done_to), len(selected) - len(done_to)
        for task in done_to:
            self._log(
                request, "Run requested from the admin task=%s user=%s", "admin_run_now", task.name
            )
        self._history(request, done_to, gettext("Requested a run."))
        live = self._scheduler_live() if selected else True
        # "At its next tick" only where a scheduler is live and some requested task is not
        # paused (the warnings below say when the others start).
        if requested and live and any(not t.paused for t in done_to):
            self.message_user(
                request,
                ngettext(
                    "Requested a run of %(count)d task: a scheduler starts it at its next tick.",
                    "Requested a run of %(count)d tasks: a scheduler starts them at its next tick.",
                    requested,
                )
                % {"count": requested},
                messages.SUCCESS,
            )
        elif requested:
            # The warning that no scheduler is running, or that they are paused, says when
            # they start.
            self.message_user(
                request,
                ngettext(
                    "Requested a run of %(count)d task.",
                    "Requested a run of %(count)d tasks.",
                    requested,
                )
                % {"count": requested},
                messages.SUCCESS,
            )
        if unchanged and live:
            self.message_user(
                request,
                ngettext(
                    "%(count)d already had a run requested; a scheduler starts it at its next "
                    "tick.",
                    "%(count)d already had a run requested; a scheduler starts them at its next "
                    "tick.",
                    unchanged,
                )
                % {"count": unchanged},
                messages.INFO,
            )
        elif unchanged:
            self.message_user(
                request,
                ngettext(
                    "%(count)d already had a run requested.",
                    "%(count)d already had a run requested.",
                    unchanged,
                )
                % {"count": unchanged},
                messages.INFO,
            )
        self._warn_paused(request, paused)
        if running:
            self.message_user(
                request,
                ngettext(
                    '%(count)d of them has a run still going and overlap "skip": its '
                    "requested run is recorded as skipped if that run has not ended by then.",
                    '%(count)d of them have a run still going and overlap "skip": their '
                    "requested runs are recorded as skipped if those runs have not ended by "
                    "then.",
                    running,
                )
                % {"count": running},
                messages.WARNING,
            )
        if selected:
            self._warn_no_scheduler(request, live)
        self._warn_retired(request, queryset.retired().count())

    # Messages -----------------------------------------------------------------------------

    def _history(self, request: HttpRequest, tasks: list[Task], message: str) -> None:
        """Record each change in the tasks' admin History, as the task page's buttons do."""
        for task in tasks:
            self.log_change(request, task, message)

    def _log(self, request: HttpRequest, message: str, action: str, task: str) -> None:
        """Log one task's state change; `message` ends with the task's and the user's fields."""
        user = request.user.get_username()
        logger.info(message, task, user, extra={"action": action, "task": task, "user": user})

    def _warn_retired(self, request: HttpRequest, count: int) -> None:
        if not count:
            return
        self.message_user(
            request,
            ngettext(
                "Left %(count)d retired task alone: it is no longer in settings and never runs.",
                "Left %(count)d retired tasks alone: they are no longer in settings and never run.",
                count,
            )
            % {"count": count},
            messages.WARNING,
        )

    @staticmethod
    def _scheduler_live() -> bool:
        """Whether a scheduler is live by the header's rule."""
        return live_processes(clock()).exists()

    def _warn_no_scheduler(self, request: HttpRequest, live: bool | None = None) -> None:
        """Warn that a requested run waits: no scheduler is live by the header's rule."""
        if self._scheduler_live() if live is None else live:
            return
        self.message_user(
            request,
            gettext(
                "No scheduler is running: the run starts once one is started "
                "(manage.py runscheduler)."
            ),
            messages.WARNING,
        )

    def _warn_paused(self, request: HttpRequest, count: int) -> None:
        if not count:
            return
        self.message_user(
            request,
            ngettext(
                "%(count)d of them is paused: its run starts once it is resumed.",
                "%(count)d of them are paused: their runs start once they are resumed.",
                count,
            )
            % {"count": count},
            messages.WARNING,
        )


def _changed(
    queryset: TaskQuerySet, tasks: list[Task], change: Callable[[TaskQuerySet], int]
) -> list[Task]:
    """Apply `change` to each task's row by a conditional UPDATE of its own; return the tasks
    it changed.

    One UPDATE per task rather than one for all: its count tells whether this request made
    the change, so a row another request changed after this one read it gets no History
    entry, log line or message from this one.
    """
    rows = Task.objects.using(queryset.db)
    return [task for task in tasks if change(rows.filter(pk=task.pk))]


def _request_may_be_skipped(task: Task) -> bool:
    """Whether a run requested now meets a run still going of a task that skips overlaps:
    the overlap rule applies to a requested run as to any other."""
    return not task.paused and task.is_running and task.overlap == Overlap.SKIP


# Runs are deleted in batches of this many primary keys, each batch its own short statement,
# so a bulk delete never holds one huge transaction nor reads the selection into memory.
RUN_DELETE_BATCH = 1000


@admin.action(description=_("Delete selected %(verbose_name_plural)s"), permissions=["delete"])
def delete_selected(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Run]
) -> TemplateResponse | None:
    """Delete the selected runs in batches, after a confirmation that gives their number.

    Replaces Django's action for runs: it evaluates the selection and renders one hidden
    input per object, which on a year of history is 500,000 rows read and sent back.
    A running run is never deleted: it is still executing, and its outcome must have a row
    to land on; nor is a queued one, which a worker is about to execute.
    """
    runs = cast(RunQuerySet, queryset)
    deletable = runs.finished()
    running = runs.unfinished().count()
    if request.POST.get("post"):
        deleted = delete_in_batches(deletable)
        if deleted:
            logger.info(
                "Runs deleted from the admin count=%d user=%s",
                deleted,
                request.user.get_username(),
                extra={"action": "admin_delete_runs"},
            )
            modeladmin.message_user(
                request,
                gettext("Successfully deleted %(count)d %(items)s.")
                % {"count": deleted, "items": model_ngettext(modeladmin.opts, deleted)},
                messages.SUCCESS,
            )
        _warn_running(modeladmin, request, running)
        return None
    count = deletable.count()
    opts = modeladmin.opts
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": gettext("Delete multiple objects"),
        "subtitle": None,
        "opts": opts,
        "media": modeladmin.media,
        "summary": runs_of_history(count),
        "count": count,
        "running": running,
        # The page's own selection, or the filters in the URL with select_across: never the
        # list of every selected primary key.
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(
        request,
        f"admin/{opts.app_label}/{opts.model_name}/delete_selected_confirmation.html",
        context,
    )


def delete_in_batches(queryset: RunQuerySet) -> int:
    """Delete the runs of `queryset` by batches of primary keys; return how many went."""
    keys = queryset.order_by("pk").values_list("pk", flat=True)
    deleted, last = 0, None
    while True:
        # Keyset pagination: each batch starts after the last key, so no batch walks again
        # over the index entries of rows the previous batches deleted.
        batch = list((keys if last is None else keys.filter(pk__gt=last))[:RUN_DELETE_BATCH])
        if not batch:
            return deleted
        deleted += Run.objects.using(queryset.db).filter(pk__in=batch).delete()[0]
        last = batch[-1]


def _warn_running(modeladmin: admin.ModelAdmin[Any], request: HttpRequest, count: int) -> None:
    if not count:
        return
    modeladmin.message_user(
        request,
        ngettext(
            "Kept %(count)d queued or running run: it is still executing or about to; delete "
            "it once it has finished.",
            "Kept %(count)d queued or running runs: they are still executing or about to; "
            "delete them once they have finished.",
            count,
        )
        % {"count": count},
        messages.WARNING,
    )
