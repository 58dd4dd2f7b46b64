from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0008_synchold"),
    ]

    operations = [
        migrations.AddField(
            model_name="unitrun",
            name="binding_version",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
