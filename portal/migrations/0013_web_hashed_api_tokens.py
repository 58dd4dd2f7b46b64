"""API tokens stored as SHA-256 digests. Keys made by DRF's authtoken (``authtoken_token``, kept
in clear) are carried over as digests, so every client keeps working, and then removed from
that table."""

import hashlib

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


OLD_TABLE = "authtoken_token"


def hash_clear_keys(apps, schema_editor):
    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("portal", "ApiToken")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT key, user_id, created FROM {OLD_TABLE}")
        rows = cursor.fetchall()
        ApiToken.objects.bulk_create(
            [
                ApiToken(
                    user_id=user_id,
                    digest=hashlib.sha256(key.encode()).hexdigest(),
                    prefix=key[:8],
                    created=created,
                )
                for key, user_id, created in rows
            ]
        )
        cursor.execute(f"DELETE FROM {OLD_TABLE}")


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0012_scope_fleet_locks_hold_expiry'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(max_length=64, unique=True)),
                ('prefix', models.CharField(max_length=8)),
                ('created', models.DateTimeField(default=django.utils.timezone.now)),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='api_token', to=settings.AUTH_USER_MODEL)),
            ],
        ),
        migrations.RunPython(hash_clear_keys, migrations.RunPython.noop),
    ]
