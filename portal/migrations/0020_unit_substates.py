"""A unit's sub-states become columns: ``kind``, ``expanded`` and ``shutdown_sent`` were read
from the unit's ``spec`` JSON. Existing rows are filled from their spec, in batches of ids; a
group row's item names move from ``spec["expanded"]`` to ``spec["item_names"]`` and the
``shutdown_sent`` key leaves the spec (``spec["kind"]`` stays: it is the parser's dump of the
unit, which ``placement.codec`` reads back). The reverse puts the keys back."""

from django.db import migrations, models
from django.db.models.fields.json import KT

# Rows per UPDATE: a fan-out's hundred thousand units fill in a few dozen statements, none
# holding its locks for long.
BATCH = 5000


def _id_ranges(UnitRun):
    """(first, past) bounds of ids, BATCH wide, over the table's ids."""
    ids = UnitRun.objects.aggregate(lo=models.Min("id"), hi=models.Max("id"))
    if ids["lo"] is None:
        return
    for lo in range(ids["lo"], ids["hi"] + 1, BATCH):
        yield lo, lo + BATCH


def _rewrite(rows, change):
    """``change(row)`` for each row (a few: group rows, stopped runs' units), saved by id."""
    for row in rows.only("id", "spec", "expanded", "shutdown_sent").iterator(chunk_size=BATCH):
        change(row)
        row.save(update_fields=["spec", "expanded", "shutdown_sent"])


def _fill_columns(row):
    spec = dict(row.spec)
    if "expanded" in spec:
        names = spec.pop("expanded")
        row.expanded = bool(names)
        spec["item_names"] = names
    if "shutdown_sent" in spec:
        row.shutdown_sent = bool(spec.pop("shutdown_sent"))
    row.spec = spec


def _fill_spec(row):
    spec = dict(row.spec)
    if "item_names" in spec:
        spec["expanded"] = spec.pop("item_names")
    if row.shutdown_sent:
        spec["shutdown_sent"] = True
    row.spec = spec


def substates_to_columns(apps, schema_editor):
    """Fill ``kind``, ``expanded`` and ``shutdown_sent`` from each row's spec."""
    UnitRun = apps.get_model("portal", "UnitRun")
    for lo, past in _id_ranges(UnitRun):
        batch = UnitRun.objects.filter(id__gte=lo, id__lt=past)
        batch.filter(spec__has_key="kind").exclude(spec__kind="task").update(kind=KT("spec__kind"))
    substates = models.Q(spec__has_key="expanded") | models.Q(spec__has_key="shutdown_sent")
    _rewrite(UnitRun.objects.filter(substates), _fill_columns)


def substates_to_spec(apps, schema_editor):
    """The reverse: the spec keys back from the columns (``kind`` never left the spec)."""
    UnitRun = apps.get_model("portal", "UnitRun")
    back = models.Q(spec__has_key="item_names") | models.Q(shutdown_sent=True)
    _rewrite(UnitRun.objects.filter(back), _fill_spec)


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0019_quota_groups_runtime'),
    ]

    operations = [
        migrations.AddField(
            model_name='unitrun',
            name='expanded',
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name='unitrun',
            name='kind',
            field=models.CharField(choices=[('task', 'DAG task'), ('step', 'Step'), ('workflow', 'Whole entrypoint'), ('exit', 'Exit handler'), ('transfer', 'Transfer (relay copy)')], default='task', max_length=8),
        ),
        migrations.AddField(
            model_name='unitrun',
            name='shutdown_sent',
            field=models.BooleanField(default=False),
        ),
        migrations.AddIndex(
            model_name='unitrun',
            index=models.Index(condition=models.Q(('kind__in', ('exit', 'transfer'))), fields=['run', 'kind'], name='unitrun_run_aux_kind'),
        ),
        migrations.RunPython(substates_to_columns, substates_to_spec, elidable=True),
    ]
