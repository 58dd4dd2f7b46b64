"""Forms of the browser pages: the submit form, the parameter form built from the workflow's
``spec.arguments.parameters``, and the error list that points at YAML lines."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import yaml
from django import forms
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.cache import cache
from django.core.files.uploadedfile import UploadedFile
from django.db.models import QuerySet

from placement import parser
from portal.quotas.models import PriorityClass
from portal.selectors import projects_of
from sites.models import Project

MAX_UPLOAD_BYTES = 1024 * 1024
PARAM_PREFIX = "param-"
_FORM_LIMITS = parser.Limits(max_body_bytes=MAX_UPLOAD_BYTES)


class SubmitForm(forms.Form):
    """The workflow itself (pasted or uploaded) and the project to run it in."""

    manifest = forms.CharField(
        label="Workflow YAML",
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={
                "rows": 18,
                "spellcheck": "false",
                "class": "code",
                "autocomplete": "off",
                "wrap": "off",
            }
        ),
    )
    upload = forms.FileField(
        label="…or upload a file",
        required=False,
        widget=forms.ClearableFileInput(attrs={"accept": ".yaml,.yml,.json"}),
    )
    project = forms.ModelChoiceField(
        queryset=Project.objects.none(),
        required=False,
        to_field_name="name",
        empty_label="(no project)",
    )
    # The quota queue's order: empty is the project's default class.
    priority_class = forms.ModelChoiceField(
        queryset=PriorityClass.objects.all(),
        required=False,
        to_field_name="name",
        empty_label="(the project's default)",
        label="Priority",
    )

    def __init__(
        self, *args: Any, user: AbstractBaseUser | AnonymousUser | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        project_field = self.fields["project"]
        assert isinstance(project_field, forms.ModelChoiceField)
        project_field.queryset = projects_for(user)
        if not self.is_bound:
            from portal.services import default_project

            only = default_project(user) if user is not None else None
            if only is not None:
                project_field.initial = only.name
        if user is not None and _has_one_project(user):
            # Submitted without a project, the run goes to the user's only project anyway.
            project_field.empty_label = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload: UploadedFile | None = data.get("upload")
        if upload:
            if upload.size is not None and upload.size > MAX_UPLOAD_BYTES:
                self.add_error("upload", f"The file is larger than {MAX_UPLOAD_BYTES} bytes.")
                return data
            try:
                data["manifest"] = upload.read().decode("utf-8-sig")
            except UnicodeDecodeError:
                self.add_error("upload", "The file is not UTF-8 text.")
                return data
        if not (data.get("manifest") or "").strip():
            self.add_error("manifest", "Paste a workflow or upload a file.")
        return data


def _has_one_project(user: Any) -> bool:
    from portal.services import default_project

    return default_project(user) is not None


def projects_for(user: AbstractBaseUser | AnonymousUser | None) -> QuerySet[Project]:
    if user is None or not user.is_authenticated:
        return Project.objects.none()
    return projects_of(user)


# --------------------------------------------------------------------------------------------
# Parameters


@dataclass(frozen=True)
class WorkflowParameter:
    name: str
    value: str
    enum: tuple[str, ...]
    description: str


def _scalar(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# The parameter form is rebuilt on every keystroke in the editor: the same document is read
# again and again, so its parameters are kept by the document's hash.
PARAMETERS_CACHE_SECONDS = 600


def workflow_parameters(text: str) -> list[WorkflowParameter]:
    """``spec.arguments.parameters`` of a YAML/JSON workflow; an empty list when the text cannot
    be read (the preview reports why). Read with the parser's bounded decoder (libyaml, alias
    and size limits), so a hostile document cannot make this cheap helper expensive, and cached
    by the document's hash (Django's cache)."""
    if not text.strip() or len(text) > MAX_UPLOAD_BYTES or re.search(r"(^|\s)\*\w", text):
        return []
    key = (
        "portal:workflow-parameters:" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    )
    cached = cache.get(key)
    if isinstance(cached, list):
        return cached
    params = _read_parameters(text)
    cache.set(key, params, PARAMETERS_CACHE_SECONDS)
    return params


def _read_parameters(text: str) -> list[WorkflowParameter]:
    try:
        doc = parser.decode_document(text, _FORM_LIMITS)
    except parser.WorkflowInvalid:
        return []
    spec = doc.get("spec") if isinstance(doc, dict) else None
    args = spec.get("arguments") if isinstance(spec, dict) else None
    items = args.get("parameters") if isinstance(args, dict) else None
    out: list[WorkflowParameter] = []
    for p in items if isinstance(items, list) else []:
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            continue
        if isinstance(p.get("valueFrom"), dict):
            continue  # resolved by Argo, not asked of the user
        enum = p.get("enum")
        out.append(
            WorkflowParameter(
                name=p["name"],
                value=_scalar(p.get("value")) or _scalar(p.get("default")) or "",
                enum=tuple(s for s in (_scalar(e) for e in enum) if s is not None)
                if isinstance(enum, list)
                else (),
                description=p["description"] if isinstance(p.get("description"), str) else "",
            )
        )
    return out


class ParametersForm(forms.Form):
    """One field per workflow parameter: a select for an enum, a text input otherwise."""

    def __init__(self, params: list[WorkflowParameter], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params = params
        if self.is_bound:
            # A parameter the request does not carry keeps the workflow's own value.
            data: dict[str, Any] = {k: self.data.get(k) for k in self.data}
            for p in params:
                if PARAM_PREFIX + p.name not in data:
                    data[PARAM_PREFIX + p.name] = p.value or (p.enum[0] if p.enum else "")
            self.data = data
        for p in params:
            field: forms.Field
            if p.enum:
                field = forms.ChoiceField(
                    choices=[(v, v) for v in p.enum], initial=p.value or p.enum[0]
                )
            else:
                field = forms.CharField(initial=p.value, required=False, strip=False)
            field.label = p.name
            field.help_text = p.description
            self.fields[PARAM_PREFIX + p.name] = field

    def arguments(self) -> dict[str, str]:
        """The values to submit (call after ``is_valid``)."""
        return {
            name[len(PARAM_PREFIX) :]: str(value)
            for name, value in self.cleaned_data.items()
            if name.startswith(PARAM_PREFIX)
        }


# --------------------------------------------------------------------------------------------
# Errors next to their lines


@dataclass(frozen=True)
class ShownError:
    path: str
    message: str
    line: int | None
    source: str  # the text of that line, to show beside the message


_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_LINE_IN_MESSAGE = re.compile(r"line (\d+)")


def _path_parts(path: str) -> list[str | int]:
    return [
        int(index) if index else key
        for key, index in ((m.group(1), m.group(2)) for m in _PATH_PART.finditer(path))
    ]


# libyaml when present: finding an error's line in a large document with PyYAML's pure-Python
# composer took longer than refusing the document.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_NESTING_LIMIT = 64


def _compose(text: str) -> Any:
    """The YAML node tree of ``text`` (with line marks), or None when it cannot be read. Nesting
    is checked on the flat event stream first: libyaml's composer recurses in C."""
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_YAML_LOADER):
            if isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
                depth += 1
                if depth > _NESTING_LIMIT:
                    return None
            elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                depth -= 1
        return yaml.compose(text, Loader=_YAML_LOADER)
    except yaml.YAMLError:
        return None


_UNSET: Any = object()


def line_of(text: str, path: str, node: Any = _UNSET) -> int | None:
    """The 1-based line where ``path`` (``spec.templates[2].dag``) is in the YAML ``text``:
    the deepest part of the path that exists, so a missing key points at its parent.
    ``node``: the text already composed (``_compose``), when the caller has it."""
    if node is _UNSET:
        node = _compose(text)
    if node is None:
        return None
    line: int = node.start_mark.line + 1
    for part in _path_parts(path):
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    line = key.start_mark.line + 1
                    node = value
                    break
            else:
                return line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def shown_errors(text: str, errors: list[Any]) -> list[ShownError]:
    """The service's errors (``{"path", "message"[, "line"]}`` dicts or objects with those
    attributes) with the line each concerns, found from the path when the service gave none."""
    lines = text.splitlines()
    out: list[ShownError] = []
    composed: list[Any] = []  # composed once, on the first error that needs a line
    for err in errors:
        get = err.get if isinstance(err, dict) else lambda k, e=err: getattr(e, k, None)
        path = str(get("path") or "")
        message = str(get("message") or "")
        line = get("line")
        if not isinstance(line, int):
            found = _LINE_IN_MESSAGE.search(message)
            if found:
                line = int(found.group(1))
            elif path and len(lines) == 1:
                line = 1  # one line (JSON as a client sends it): nothing to look for
            elif path:
                if not composed:
                    composed.append(_compose(text))
                line = line_of(text, path, composed[0])
            else:
                line = None
        source = lines[line - 1].rstrip() if line and 0 < line <= len(lines) else ""
        out.append(ShownError(path=path, message=message, line=line, source=source))
    return out
