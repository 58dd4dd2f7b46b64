"""``manage.py drf_create_token USER [-r]``: the user's API key, printed once.

The command DRF's ``rest_framework.authtoken`` had, with the same arguments and output line, over
hashed tokens (``portal.api_tokens``): the key is shown only here, so a user who has a token
already gets a new one only with ``-r`` (the old key stops working)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.api_tokens import TokenExists, api_token_create


class Command(BaseCommand):
    help = "Create a user's API token and print its key (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", type=str)
        parser.add_argument(
            "-r",
            "--reset",
            action="store_true",
            dest="reset_token",
            default=False,
            help="Replace the user's token (the old key stops working) and print the new key",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        username = options["username"]
        user_model = get_user_model()
        try:
            user = user_model._default_manager.get_by_natural_key(username)
        except user_model.DoesNotExist:
            raise CommandError(f"Cannot create the Token: user {username} does not exist") from None
        try:
            key = api_token_create(user=user, replace=options["reset_token"])
        except TokenExists as exc:
            raise CommandError(f"{exc} (drf_create_token -r {username})") from None
        self.stdout.write(f"Generated token {key} for user {username}")
