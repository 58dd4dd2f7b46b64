"""Rule revisions in the admin: the audit trail, drafts (filter by state), each revision's
diff, and approve / reject / apply / rollback as actions calling the services."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join

from placement.api.revisions import can_write_revisions
from placement.revisions import config as cfg
from placement.revisions import replay as replaying
from placement.revisions import services
from placement.revisions.models import RuleRevision
from placement.revisions.selectors import current_config


@admin.register(RuleRevision)
class RuleRevisionAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "state",
        "author",
        "approved_by",
        "applied_at",
        "source",
        "comment",
        "moved",
    )
    list_filter = ("state", "source")
    ordering = ("-id",)
    actions = ["approve", "reject", "apply", "rollback"]
    readonly_fields = (
        "parent",
        "restores",
        "author",
        "approved_by",
        "applied_by",
        "state",
        "comment",
        "source",
        "diff_view",
        "replay_summary",
        "created_at",
        "approved_at",
        "applied_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        """The revision with its diff, and the review buttons its state allows."""
        revision = RuleRevision.objects.filter(pk=object_id).first()
        buttons: list[tuple[str, str]] = []
        if revision is not None and can_write_revisions(request.user):
            by_state = {
                "draft": [("approve", "Approve"), ("reject", "Reject"), ("apply", "Apply")],
                "approved": [("apply", "Apply"), ("reject", "Reject")],
            }
            buttons = by_state.get(revision.state, [("rollback", "Roll back to this")])
        context = {**(extra_context or {}), "review_actions": buttons}
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        return super().get_actions(request) if can_write_revisions(request.user) else {}

    @admin.display(description="Moved at apply")
    def moved(self, obj: RuleRevision) -> Any:
        return (obj.replay_summary or {}).get("moved", "")

    @admin.display(description="Diff against its parent")
    def diff_view(self, obj: RuleRevision) -> Any:
        lines = cfg.diff_lines(obj.diff or {}) or ["no change"]
        return format_html_join("\n", "<div><code>{}</code></div>", ((line,) for line in lines))

    def _each(self, request: HttpRequest, queryset: QuerySet[RuleRevision], act: Any) -> None:
        for revision in queryset.order_by("id"):
            try:
                act(revision)
            except services.RevisionConflict as exc:
                self.message_user(request, f"{revision}: {exc}", messages.ERROR)
            except (services.RevisionError, services.RevisionForbidden) as exc:
                self.message_user(request, f"{revision}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{revision}: done.", messages.SUCCESS)

    @admin.action(description="Approve (not your own)")
    def approve(self, request: HttpRequest, queryset: QuerySet[RuleRevision]) -> None:
        self._each(
            request, queryset, lambda r: services.revision_approve(revision=r, user=request.user)
        )

    @admin.action(description="Reject")
    def reject(self, request: HttpRequest, queryset: QuerySet[RuleRevision]) -> None:
        self._each(
            request, queryset, lambda r: services.revision_reject(revision=r, user=request.user)
        )

    @admin.action(description="Apply (replayed first; the summary is kept)")
    def apply(self, request: HttpRequest, queryset: QuerySet[RuleRevision]) -> None:
        def act(r: RuleRevision) -> None:
            result = replaying.replay(base=current_config(), draft=r.config)
            self.message_user(request, "; ".join(replaying.summary_lines(result)))
            services.revision_apply(revision=r, user=request.user, replay_summary=result["summary"])

        self._each(request, queryset, act)

    @admin.action(description="Roll back to this revision (a new draft)")
    def rollback(self, request: HttpRequest, queryset: QuerySet[RuleRevision]) -> None:
        def act(r: RuleRevision) -> None:
            draft = services.revision_rollback(revision=r, user=request.user)
            result = replaying.replay(base=current_config(), draft=draft.config)
            self.message_user(request, f"{draft}: " + "; ".join(replaying.summary_lines(result)))

        self._each(request, queryset, act)
