"""The shell examples of README.md and docs/*.md, extracted and run (tests/test_docs_examples.py).

An example is a fenced block tagged ``sh``/``bash``/``shell``/``console``, or an untagged block
whose first line starts with ``$ ``. Each is either run or marked, on a line of its own before the
fence (blank lines between allowed), with

    <!-- not run: why -->

In a block with ``$ `` prompts, each command runs in one bash session per document (variables set
by an earlier block, such as ``P``, ``S`` and ``A``, stay set) and the lines after it, up to the
next prompt or a blank line, are its expected output, checked by ``expectation_failures``:

- nothing shown: the command exits 0;
- a bare number (``204``): the command prints exactly that (``-w '%{http_code}'``); a number
  after the body (``{...} 400``, from ``-w ' %{http_code}'``) is checked so, then the body;
- ``{"detail": "..."}``: a DRF error answer with that detail;
- ``{"errors": [{"path": "x", ...``: a 400 naming the field ``x`` first;
- other JSON: a JSON answer of that shape (object or array) with no ``detail`` or ``errors``,
  carrying every key shown on its first line (in the first item, for an array);
- anything else (a summary written for the reader): the command exits 0 and, if it printed
  JSON, it is not an error answer.

A block with no prompt (``P=...``) runs whole as one command that must exit 0."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

EXAMPLE_TAGS = {"sh", "bash", "shell", "console"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<why>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<tag>\S*)\s*$")
DOCUMENTS = ("README.md", "docs/*.md")


@dataclass
class Command:
    text: str
    line: int
    shown: list[str] = field(default_factory=list)


@dataclass
class Example:
    path: Path
    line: int
    tag: str
    body: list[str]
    not_run: str | None
    commands: list[Command]


def documents(root: Path) -> list[Path]:
    found: list[Path] = []
    for pattern in DOCUMENTS:
        found += sorted(root.glob(pattern))
    return found


def _complete(text: str) -> bool:
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:  # an open quotation: the command goes on on the next line
        return False
    return True


def _commands(body: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    i = 0
    current: Command | None = None
    while i < len(body):
        line = body[i]
        if line.startswith("$ "):
            text = line[2:]
            start = i
            while not _complete(text) and i + 1 < len(body):
                i += 1
                text += "\n" + body[i]
            current = Command(text=text, line=first_line + start)
            commands.append(current)
        elif current is not None:
            if line.strip() == "":
                current = None
            else:
                current.shown.append(line)
        i += 1
    return commands


def examples(path: Path) -> list[Example]:
    lines = path.read_text().split("\n")
    found: list[Example] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, tag = i, m.group("tag")
        body: list[str] = []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        prompted = any(b.startswith("$ ") for b in body)
        if tag not in EXAMPLE_TAGS and not (tag == "" and body and body[0].startswith("$ ")):
            continue
        j = start - 1
        while j >= 0 and lines[j].strip() == "":
            j -= 1
        marker = NOT_RUN.match(lines[j]) if j >= 0 else None
        found.append(
            Example(
                path=path,
                line=start + 1,
                tag=tag,
                body=body,
                not_run=marker.group("why") if marker else None,
                commands=_commands(body, start + 2)
                if prompted
                else [Command(text="\n".join(body), line=start + 2)],
            )
        )
    return found


def _detail(shown: str) -> str | None:
    m = re.search(r'"detail"\s*:\s*"((?:[^"\\]|\\.)*)"', shown)
    return json.loads(f'"{m.group(1)}"') if m else None


def _top_keys(line: str, depth: int) -> list[str]:
    """The keys at one nesting depth of a (possibly cut) line of JSON."""
    keys: list[str] = []
    level = 0
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"\s*(:)?|[\[{]|[\]}]', line):
        token = m.group(0)
        if token in ("[", "{"):
            level += 1
        elif token in ("]", "}"):
            level -= 1
        elif m.group(2) and level == depth:
            keys.append(m.group(1))
    return keys


def expectation_failures(command: Command, status: int, stdout: str) -> list[str]:
    """What the command's answer gets wrong against the output the document shows."""
    shown = "\n".join(command.shown).strip()
    where = f"line {command.line}: {command.text.splitlines()[0][:80]}"
    failures: list[str] = []
    if status != 0:
        return [f"{where}: exited {status}: {stdout[-400:]}"]
    suffix = re.search(r" (\d{3})$", shown)
    if suffix:  # the status printed after the body (`-w ' %{http_code}'`)
        printed = re.search(r" (\d{3})\s*$", stdout)
        if not printed or printed.group(1) != suffix.group(1):
            return [f"{where}: expected status {suffix.group(1)}, got {stdout[-300:]!r}"]
        shown, stdout = shown[: suffix.start()], stdout[: printed.start()]
    answer: object = None
    with contextlib.suppress(ValueError):
        answer = json.loads(stdout)
    if re.fullmatch(r"\d{3}", shown):
        if stdout.strip() != shown:
            failures.append(
                f"{where}: printed {stdout.strip()[:200]!r}, the document shows {shown}"
            )
        return failures
    if shown.startswith("{") and '"errors"' in shown.split("\n")[0]:
        path = re.search(r'"path"\s*:\s*"([^"]*)"', shown)
        errors = answer.get("errors") if isinstance(answer, dict) else None
        if not errors:
            return [f"{where}: expected a 400 with errors, got {stdout[:300]!r}"]
        if path and errors[0].get("path") != path.group(1):
            failures.append(f"{where}: first error path {errors[0].get('path')!r}, not {path[1]!r}")
        return failures
    detail = _detail(shown)
    if shown.startswith("{") and detail is not None:
        if not isinstance(answer, dict) or answer.get("detail") != detail:
            failures.append(f"{where}: expected detail {detail!r}, got {stdout[:300]!r}")
        return failures
    is_error = isinstance(answer, dict) and ("detail" in answer or "errors" in answer)
    if is_error:
        return [f"{where}: an error answer: {stdout[:300]!r}"]
    if shown.startswith(("{", "[")):
        want: type = dict if shown.startswith("{") else list
        if not isinstance(answer, want):
            return [f"{where}: expected a JSON {want.__name__}, got {stdout[:300]!r}"]
        first: object = answer
        if isinstance(answer, list):
            first = answer[0] if answer else {}
        if not isinstance(first, dict):
            return [f"{where}: expected objects, got {stdout[:300]!r}"]
        keys = _top_keys(command.shown[0], 1 if isinstance(answer, dict) else 2)
        missing = [k for k in keys if k not in first]
        if missing:
            failures.append(f"{where}: keys shown but not answered: {missing}")
    return failures
