"""The ``operators`` and ``rule editors`` groups and their model permissions.

Operators (``is_staff`` members of the group) view and change sites, add/change/delete links,
datasets and replicas, and view everything else the admin shows; ``sites.admin`` narrows what
they see to the sites they operate. Rule editors add, change and delete placement rules.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

OPERATOR_PERMISSIONS = {
    ("sites", "site"): ["view", "change"],
    ("sites", "sitelink"): ["view", "add", "change", "delete"],
    ("sites", "dataset"): ["view", "add", "change", "delete"],
    ("sites", "datasetreplica"): ["view", "add", "change", "delete"],
    ("sites", "project"): ["view"],
    ("placement", "placementrule"): ["view"],
    ("portal", "workflowtemplate"): ["view"],
    ("portal", "workflowrun"): ["view"],
    ("portal", "unitrun"): ["view"],
    ("portal", "placementdecision"): ["view"],
    ("portal", "runevent"): ["view"],
}
RULE_EDITOR_PERMISSIONS = {
    ("placement", "placementrule"): ["view", "add", "change", "delete"],
}
GROUPS = {"operators": OPERATOR_PERMISSIONS, "rule editors": RULE_EDITOR_PERMISSIONS}


def _permissions(apps, wanted):
    Permission = apps.get_model("auth", "Permission")
    found = []
    for (app_label, model), actions in wanted.items():
        for action in actions:
            found.append(
                Permission.objects.get(
                    content_type__app_label=app_label, codename=f"{action}_{model}"
                )
            )
    return found


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations ran (post_migrate); create them
    # now so that the groups can refer to them on a fresh database.
    for app_label in ("sites", "placement", "portal"):
        app_config = apps.get_app_config(app_label)
        app_config.models_module = True
        create_permissions(app_config, verbosity=0, apps=apps)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    for name, wanted in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(*_permissions(apps, wanted))


def remove_groups(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name__in=list(GROUPS)).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("sites", "0001_initial"),
        ("placement", "0001_initial"),
        ("portal", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
