"""Who may see what: each page behind its own view permission; which list actions may run."""

from __future__ import annotations

from typing import Any

from django.contrib.admin import ModelAdmin, helpers
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.auth import get_permission_codename
from django.core.exceptions import BadRequest, PermissionDenied
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from django_posixcron.admin.lookups import as_pk, checked_changelist


def can_view(request: HttpRequest, model: type[Model]) -> bool:
    """Return whether the user holds the model's view permission.

    Django's admin lets the change permission stand in for view. Nothing here can be changed
    in the admin, so a change permission, granted by habit or by a group made for another
    app, must not open the history and its tracebacks: only view does.
    """
    opts = model._meta
    return request.user.has_perm(f"{opts.app_label}.{get_permission_codename('view', opts)}")


def refuse_bad_actions(model_admin: ModelAdmin[Any], request: HttpRequest) -> None:
    """Raise PermissionDenied for a list action posted by a user it is not offered to, and
    BadRequest for a selection that is not ids.

    Django's own answer to the first is the list again, at most with "No action selected.": a
    user who posts pause or delete without the permission is told plainly, as the buttons do.
    To the second it is a 500, from the query that filters by the selection.
    """
    if request.method != "POST":
        return
    chosen = set(request.POST.getlist("action"))
    declared = {a if isinstance(a, str) else a.__name__ for a in model_admin.actions or ()}
    declared |= {name for name, _ in model_admin.admin_site.actions}  # delete_selected
    if chosen & (declared - set(model_admin.get_actions(request))):
        raise PermissionDenied
    if any(as_pk(pk) is None for pk in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)):
        raise BadRequest("The selection holds a value that is not an id.")


class Guarded(ModelAdmin):  # type: ignore[type-arg]
    """The guards every list of the app shares: pages behind the view permission alone,
    lookups a database cannot run answered with Django's "?e=1", actions checked first."""

    def get_empty_value_display(self) -> SafeString:
        # The app's own empty cells show a dash; Django's (an empty timeout or description)
        # its default hyphen: one page showed both. A site's own choice stands.
        site = str(self.admin_site.empty_value_display)
        return mark_safe("—" if site == "-" else site)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view(request, self.model)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only view opens the pages: a delete permission alone opened the confirmation of
        # a run or a retired task (its name, its history's size) and deleted them.
        return super().has_delete_permission(request, obj) and self.has_view_permission(
            request, obj
        )

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> Any:
        """Back to the list after deleting one row from its page, as Django does for a user
        who may change rows; nobody may here, and Django sent everyone to the admin index."""
        response = super().response_delete(request, obj_display, obj_id)
        index = reverse("admin:index", current_app=self.admin_site.name)
        if (
            isinstance(response, HttpResponseRedirect)
            and response.url == index
            and self.has_view_permission(request)
        ):
            changelist = reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                current_app=self.admin_site.name,
            )
            preserved: dict[str, Any] = {
                "preserved_filters": self.get_preserved_filters(request),
                "opts": self.opts,
            }
            return HttpResponseRedirect(add_preserved_filters(preserved, changelist))
        return response

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        return checked_changelist(request, super().get_changelist_instance)

    def get_search_results(
        self, request: HttpRequest, queryset: Any, search_term: str
    ) -> tuple[Any, bool]:
        # No stored text holds NUL, and PostgreSQL refuses it in a query (DataError, a 500):
        # the list's search form strips it, the admin's autocomplete passes it on.
        if "\x00" in search_term:
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        refuse_bad_actions(self, request)
        return super().changelist_view(request, extra_context)
