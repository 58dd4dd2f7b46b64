"""A pod's files: its input artifacts loaded before it runs, its output parameters and
artifacts read back and saved after it ends, as Argo's init and wait containers do
(workflow/executor/executor.go)."""

from __future__ import annotations

import os
import posixpath
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from sandbox import confined, quantity
from sandbox.argo.expr import as_param
from sandbox.argo.layout import PodLayout, container_path
from sandbox.argo.repository import ArtifactRepository
from sandbox.argo.run import RunState
from sandbox.artifacts import ArtifactError, fetch_http, is_archive_none, unpack
from sandbox.pod import PodResult
from sandbox.s3.client import Unreachable, send
from sandbox.s3.errors import parse_error
from sandbox.store import clone


class ParameterTooLarge(Exception):
    """An output parameter's file holds more than a parameter may."""


def parameter_too_large(size: int, limit: int) -> str:
    return (
        f"the value is {size} bytes, more than the {limit} bytes "
        f"({quantity.fmt('memory', limit)}) an output parameter may hold; "
        "pass large values as an output artifact"
    )


class PodFiles:
    """Loads a pod's inputs and reads back its outputs, through the Workflow's repository."""

    def __init__(self, state: RunState, repository: ArtifactRepository) -> None:
        self.state = state
        self.repository = repository

    def load_inputs(self, node: dict[str, Any], layout: PodLayout, netns: int) -> None:
        for art in (node.get("inputs") or {}).get("artifacts") or []:
            path = art.get("path")
            if not path:
                continue
            try:
                with layout.at(str(path), create=True) as dest:
                    self._load_one(art, dest, netns)
            except OSError as exc:
                # A link the step left leads out of its folder, or the path is unusable.
                if not art.get("optional"):
                    raise ArtifactError(
                        f"failed to load artifact {art.get('name')}: open {path}: "
                        f"{exc.strerror or exc}"
                    ) from exc
            except ArtifactError:
                if art.get("optional"):
                    continue
                raise

    def _load_one(self, art: dict[str, Any], dest: tuple[int, str], netns: int) -> None:
        name = art.get("name")
        if "raw" in art:
            confined.write_file(*dest, str((art.get("raw") or {}).get("data", "")).encode())
        elif "http" in art:
            url = str((art.get("http") or {}).get("url", ""))
            if not self._fetch_from_repository(url, dest):
                fetch_http(url, dest, netns, self.state.member.next_uid())
            if not is_archive_none(art):
                # Argo's executor untars whatever input it loaded that is a tarball, from any
                # driver, unless the artifact says `archive: none` (executor.go,
                # loadArtifacts: isTarball, then untar into the artifact's path).
                data = confined.read_file(*dest)
                os.unlink(dest[1], dir_fd=dest[0])
                unpack(data, dest)
        elif "git" in art:
            repo = (art.get("git") or {}).get("repo", "")
            raise ArtifactError(
                f"failed to load artifact {name}: git clone {repo}: "
                "dial tcp: lookup: Temporary failure in name resolution"
            )
        elif "s3" in art:
            s3 = art.get("s3") or {}
            # A key-only artifact is read from the workflow's artifact repository.
            own = not s3.get("endpoint") and not s3.get("bucket")
            repo = self.repository.repo if own and self.repository.repo is not None else None
            repo = repo or self.state.member.repository_for(s3, self.state.namespace)
            repo.load(str(s3.get("key", "")), dest)
        else:
            raise ArtifactError(f"required artifact '{name}' not supplied")

    def _fetch_from_repository(self, url: str, dest: tuple[int, str]) -> bool:
        """An `http` input whose host is a repository's endpoint name (a pre-signed GET):
        fetched from that repository's listener where this site may reach it, else Go's
        resolver error; False when the host is no repository's (fetched as any URL). The
        answer is judged as Argo's http driver judges it (workflow/artifacts/http/http.go):
            if res.StatusCode == http.StatusNotFound {
                return http.Response{}, errors.New(errors.CodeNotFound, res.Status)
            }
            if res.StatusCode < 200 || res.StatusCode >= 300 {
                return http.Response{}, errors.InternalErrorf("loading content from %s
                    failed with reason: %s", url, res.Status)
        with S3's own error (message and code, from the answer's XML) after the status."""
        split = urllib.parse.urlsplit(url)
        owner = self.state.sb.repositories.site_of_endpoint(split.hostname or "")
        if owner is None or split.scheme not in ("http", "https"):
            return False
        if not self.state.member.reachable(owner):
            raise ArtifactError(f'Get "{url}": dial tcp: lookup {split.hostname}: no such host')
        ep = self.state.sb.repositories.of(owner)
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
        fd = confined.create_file(dest[0], dest[1])
        with os.fdopen(fd, "wb") as out:
            try:
                res = send(ep.address, host_of(split), "GET", target, {}, into=out)
            except Unreachable as exc:
                raise ArtifactError(f'Get "{url}": {exc}') from None
        if 200 <= res.status < 300:
            return True
        status = f"{res.status} {res.reason}"
        error = parse_error(res.body, res.status)
        if res.status == 404:
            raise ArtifactError(f"{status}: {error}")
        raise ArtifactError(f"loading content from {url} failed with reason: {status}: {error}")

    def real_outputs(
        self,
        outs: dict[str, Any],
        node: dict[str, Any],
        layout: PodLayout,
        result: PodResult,
        failed: bool,
    ) -> str:
        outputs: dict[str, Any] = {}
        problem = ""
        params = []
        for p in outs.get("parameters") or []:
            vf = p.get("valueFrom") or {}
            value: str | None = None
            if "value" in p:
                value = as_param(p["value"])
            elif vf.get("path"):
                try:
                    value = self._read_param(layout, str(vf["path"]))
                except ParameterTooLarge as exc:
                    problem = problem or f"failed to get output parameter {p.get('name')}: {exc}"
                    continue
                if value is None and "default" in vf:
                    value = as_param(vf["default"])
                if value is None:
                    problem = problem or (
                        f"failed to get output parameter {p.get('name')}: "
                        f"open {vf['path']}: no such file or directory"
                    )
                    continue
                # Trims off a single newline (workflow/executor/executor.go).
                value = value.removesuffix("\n")
            elif "default" in vf:
                value = as_param(vf["default"])
            else:
                continue
            entry = {"name": p["name"], "value": value}
            if p.get("globalName"):
                entry["globalName"] = p["globalName"]
                self.state.global_scope[f"workflow.outputs.parameters.{p['globalName']}"] = value
            params.append(entry)
        if params:
            outputs["parameters"] = params
        arts, art_problem = self._save_outputs(outs, node, layout, failed)
        problem = problem or art_problem
        if arts:
            outputs["artifacts"] = arts
        outputs["result"] = result.stdout.decode("utf-8", "replace").removesuffix("\n")
        outputs["exitCode"] = str(result.exit_code)
        node["outputs"] = outputs
        return problem

    def _read_param(self, layout: PodLayout, path: str) -> str | None:
        """The file's text, refused past `execution.maxParameterBytes`: Argo's executor keeps
        a step's outputs in a WorkflowTaskResult, which etcd refuses past its request limit
        ("etcdserver: request is too large", util/kube/errors/errors.go), and keeps only the
        last 256 kB of a `result` (workflow/executor/executor.go). A parameter cut short would
        pass a wrong value on, so it fails the step instead, naming the limit. The file is
        read without following a link out of the pod's folders."""
        limit = self.state.member.execution.max_parameter_bytes
        try:
            with layout.at(path) as found:
                if found is None:
                    return None
                data = confined.read_file(*found, limit=limit + 1)
                if len(data) > limit:
                    st = confined.lstat_at(*found)
                    size = st.st_size if st is not None else len(data)
                    raise ParameterTooLarge(parameter_too_large(size, limit))
                return data.decode(errors="replace")
        except OSError:
            return None

    def _save_outputs(
        self, outs: dict[str, Any], node: dict[str, Any], layout: PodLayout, failed: bool
    ) -> tuple[list[dict[str, Any]], str]:
        arts: list[dict[str, Any]] = []
        problem = ""
        for a in outs.get("artifacts") or []:
            if a.get("from") or not a.get("path"):
                continue
            none = is_archive_none(a)
            key = (a.get("s3") or {}).get("key") or (
                f"{self.state.name}/{node['id']}/{a['name']}{'' if none else '.tgz'}"
            )
            path = container_path(str(a["path"]))
            # An output with its own location (bucket and endpoint) is saved there and
            # recorded in full; any other goes to the workflow's repository and is recorded
            # by its key only (workflow/executor/executor.go, saveArtifact: an artifact
            # without a location gets the repository's, and Argo >= 3 keeps key-only
            # outputs key-only; the repository is in status.artifactRepositoryRef).
            own_s3 = a.get("s3") or {}
            located = bool(own_s3.get("bucket") and own_s3.get("endpoint"))
            url = str((a.get("http") or {}).get("url") or "")
            try:
                with layout.at(path) as found:
                    if confined.lstat_at(*found) is None:
                        raise FileNotFoundError
                    arcname = posixpath.basename(path) or "artifact"
                    if url:
                        self._put_http(found, url, none, arcname)
                    else:
                        if located:
                            repo = self.state.member.repository_for(
                                own_s3, self.state.namespace, saving=True
                            )
                        else:
                            repo = self.repository.repo or self.state.member.repository
                        try:
                            repo.save(found, str(key), not none, arcname)
                        except OSError as exc:
                            # Not the step's file: kept apart from a missing output.
                            raise ArtifactError(exc.strerror or str(exc)) from exc
            except (FileNotFoundError, confined.Escape):
                # Missing, or a link the step left there leads out of its folder.
                if not a.get("optional") and not failed:
                    problem = problem or (
                        f"failed to save outputs: open {a['path']}: no such file or directory"
                    )
                continue
            except (ArtifactError, OSError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) else str(exc)
                problem = problem or f"failed to save outputs: {a['path']}: {reason}"
                continue
            entry = {k: clone(v) for k, v in a.items() if k in ("name", "path", "archive")}
            if url:
                entry["http"] = clone(a["http"])
            else:
                entry["s3"] = {**clone(own_s3), "key": key} if located else {"key": key}
            arts.append(entry)
        return arts, problem

    def _put_http(self, found: tuple[int, str], url: str, none: bool, arcname: str) -> None:
        """An `http` output (a pre-signed PUT) saved as Argo's executor saves it: tarred and
        gzipped unless `archive: none`, then PUT to the URL by the http driver
        (workflow/artifacts/http/http.go):
            if res.StatusCode < 200 || res.StatusCode >= 300 {
                return errors.InternalErrorf("saving file %s to %s failed with reason: %s",
                    path, url, res.Status)
        followed here by S3's own message and code. Only a repository's endpoint (where this
        site may reach it) answers: nothing else is on the network here."""
        split = urllib.parse.urlsplit(url)
        owner = self.state.sb.repositories.site_of_endpoint(split.hostname or "")
        if owner is None or not self.state.member.reachable(owner):
            raise ArtifactError(f'Put "{url}": dial tcp: lookup {split.hostname}: no such host')
        ep = self.state.sb.repositories.of(owner)
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
        with tempfile.TemporaryDirectory(prefix="sandbox-put-") as tmp:
            top = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
            try:
                if none:
                    confined.copy(found[0], found[1], top, "artifact")
                else:
                    fd = confined.create_file(top, "artifact")
                    with os.fdopen(fd, "wb") as out:
                        confined.tar_gz(found[0], found[1], arcname, out)
            finally:
                os.close(top)
            body = Path(tmp) / "artifact"
            if body.is_dir() or not body.exists():
                raise ArtifactError(f"read {arcname}: is a directory")
            with body.open("rb") as f:
                try:
                    res = send(
                        ep.address, host_of(split), "PUT", target, {}, f, body.stat().st_size
                    )
                except Unreachable as exc:
                    raise ArtifactError(f'Put "{url}": {exc}') from None
        if not 200 <= res.status < 300:
            error = parse_error(res.body, res.status)
            raise ArtifactError(
                f"saving file {arcname} to {url} failed with reason: "
                f"{res.status} {res.reason}: {error}"
            )


def host_of(split: urllib.parse.SplitResult) -> str:
    """The Host header Go's client sends for a URL (and botocore signs): the host, with its
    port only when it is not the scheme's default."""
    default = 443 if split.scheme == "https" else 80
    host = split.hostname or ""
    return host if split.port in (None, default) else f"{host}:{split.port}"
