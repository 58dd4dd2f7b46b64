"""Kubernetes-style API errors, rendered as `kind: Status` bodies."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    @classmethod
    def not_found(cls, group: str, plural: str, name: str) -> ApiError:
        what = f"{plural}.{group}" if group else plural
        return cls(
            404,
            "NotFound",
            f'{what} "{name}" not found',
            {"name": name, "group": group, "kind": plural},
        )

    @classmethod
    def already_exists(cls, group: str, plural: str, name: str) -> ApiError:
        what = f"{plural}.{group}" if group else plural
        return cls(
            409,
            "AlreadyExists",
            f'{what} "{name}" already exists',
            {"name": name, "group": group, "kind": plural},
        )

    @classmethod
    def conflict(cls, group: str, plural: str, name: str, why: str) -> ApiError:
        what = f"{plural}.{group}" if group else plural
        return cls(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {what} "{name}": {why}',
            {"name": name, "group": group, "kind": plural},
        )

    @classmethod
    def bad_request(cls, message: str, reason: str = "BadRequest") -> ApiError:
        return cls(400, reason, message)

    @classmethod
    def invalid(cls, group: str, kind: str, name: str, causes: list[dict[str, str]]) -> ApiError:
        what = f"{kind}.{group}" if group else kind
        summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
        return cls(
            422,
            "Invalid",
            f'{what} "{name}" is invalid: {summary}',
            {"name": name, "group": group, "kind": kind, "causes": causes},
        )

    @classmethod
    def expired(cls, message: str) -> ApiError:
        return cls(410, "Expired", message)
