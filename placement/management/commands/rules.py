"""``manage.py rules export [--revision N]`` and ``manage.py rules apply FILE [--dry-run]``:
the placement configuration as a YAML file kept in git, checked on each pull request."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from placement.revisions import config as cfg
from placement.revisions import replay as replaying
from placement.revisions import services
from placement.revisions.models import RuleRevision
from placement.revisions.selectors import active_revision, current_config


def _when(text: str) -> datetime:
    value = parse_datetime(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}")
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Export the placement configuration as YAML, or check and apply a YAML file."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        export = sub.add_parser("export", help="Print the configuration as YAML.")
        export.add_argument("--revision", type=int, help="A revision's id (default: active).")
        apply = sub.add_parser("apply", help="Check a file; without --dry-run, propose it.")
        apply.add_argument("file")
        apply.add_argument("--dry-run", action="store_true", help="Check, diff and replay only.")
        apply.add_argument(
            "--approve", action="store_true", help="Apply at once (only where review is off)."
        )
        apply.add_argument("--comment", default="", help="The revision's comment.")
        apply.add_argument("--author", default="", help="The username the draft is proposed as.")
        apply.add_argument(
            "--limit", type=int, default=replaying.DEFAULT_LIMIT, help="Decisions to replay."
        )
        apply.add_argument("--project", default="", help="Replay only this project's runs.")
        apply.add_argument(
            "--since", type=_when, help="Replay only runs submitted since (ISO 8601)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self.export(options.get("revision"))
        else:
            self.apply(options)

    def export(self, revision_id: int | None) -> None:
        if revision_id is not None:
            revision = RuleRevision.objects.filter(pk=revision_id).first()
            if revision is None:
                raise CommandError(f"No revision {revision_id}.")
            config = cfg.canonical(revision.config)
        else:
            active = active_revision()
            config = cfg.canonical(active.config) if active is not None else current_config()
        self.stdout.write(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), ending="")

    def apply(self, options: dict[str, Any]) -> None:
        path = Path(options["file"])
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"{path}: {exc}") from exc
        try:
            checked = services.config_check(doc)
        except services.RevisionError as exc:
            detail = exc.detail if isinstance(exc.detail, Mapping) else {"config": [exc.detail]}
            for where, messages in detail.items():
                for message in messages:
                    self.stderr.write(f"{path}: {where.removeprefix('config.')}: {message}")
            raise CommandError("the file has errors", returncode=2) from exc
        lines = cfg.diff_lines(checked.diff)
        if not lines:
            self.stdout.write("no change")
        for line in lines:
            self.stdout.write(line)
        result = replaying.replay(
            base=current_config(),
            draft=checked.config,
            limit=options["limit"],
            project=options["project"] or None,
            since=options["since"],
        )
        for line in replaying.summary_lines(result):
            self.stdout.write(line)
        for moved in result["moved"]:
            self.stdout.write(
                f"  run {moved['run']} {moved['unit']}: {moved['from']} -> {moved['to']}"
            )
        violations = result["summary"]["residency_violations"]
        if violations:
            for v in violations:
                self.stderr.write(
                    f"residency violation: run {v['run']} {v['unit']} at {v['site']} "
                    f"({', '.join(v['datasets'])})"
                )
            raise CommandError("the change would break dataset residency", returncode=3)
        if options["dry_run"] or not lines:
            return
        self.propose(checked.config, result["summary"], options)

    def propose(
        self, config: dict[str, Any], summary: dict[str, Any], options: dict[str, Any]
    ) -> None:
        author = None
        if options["author"]:
            author = get_user_model().objects.filter(username=options["author"]).first()
            if author is None:
                raise CommandError(f"No user {options['author']!r}.")
        if options["approve"] and services.review_required():
            raise CommandError("Review is on (PORTAL_RULES_REVIEW): propose a draft instead.")
        try:
            draft = services.revision_draft_create(
                user=author, config=config, comment=options["comment"], source="file"
            )
            if options["approve"]:
                services.revision_apply(revision=draft, user=author, replay_summary=summary)
                self.stdout.write(f"applied: revision {draft.pk}")
                return
        except services.RevisionConflict as exc:
            raise CommandError(str(exc), returncode=4) from exc
        except services.RevisionError as exc:
            raise CommandError(str(exc.detail)) from exc
        self.stdout.write(f"draft: revision {draft.pk}")
