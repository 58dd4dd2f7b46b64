"""The OpenAPI 3.0 description of ``/ogcapi/`` (conformance class ``oas30``): the paths of
Part 1 with their parameters and responses; bodies by reference to OGC's schemas."""

from __future__ import annotations

from typing import Any

SCHEMAS = "https://schemas.opengis.net/ogcapi/processes/part1/1.0/openapi/schemas"


def _json(description: str, schema: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"{SCHEMAS}/{schema}"}}},
    }


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": {"$ref": f"{SCHEMAS}/exception.yaml"}}},
    }


def _path_param(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def document(base: str) -> dict[str, Any]:
    """The OpenAPI 3.0 document of the OGC API - Processes face, served at ``/ogcapi/api``."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Multi-site workflow portal: OGC API - Processes",
            "version": "1.0.0",
            "description": "Catalogue WorkflowTemplates as processes, runs as jobs.",
        },
        "servers": [{"url": base}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "Token <key>",
                },
            }
        },
        "paths": {**_landing_paths(), **_process_paths(), **_job_paths()},
    }


# Either of the two schemes answers every operation but the landing pages.
AUTH: list[dict[str, list[str]]] = [{"token": []}, {"bearer": []}]


def _landing_paths() -> dict[str, Any]:
    return {
        "/": {
            "get": {
                "operationId": "getLandingPage",
                "responses": {"200": _json("landing page", "landingPage.yaml")},
            }
        },
        "/conformance": {
            "get": {
                "operationId": "getConformanceClasses",
                "responses": {"200": _json("conformance classes", "confClasses.yaml")},
            }
        },
        "/api": {
            "get": {
                "operationId": "getApiDefinition",
                "responses": {"200": {"description": "this document"}},
            }
        },
    }


def _process_paths() -> dict[str, Any]:
    return {
        "/processes": {
            "get": {
                "operationId": "getProcesses",
                "security": AUTH,
                "responses": {"200": _json("the processes", "processList.yaml")},
            }
        },
        "/processes/{processID}": {
            "get": {
                "operationId": "getProcessDescription",
                "security": AUTH,
                "parameters": [_path_param("processID")],
                "responses": {
                    "200": _json("the process", "process.yaml"),
                    "404": _problem("no-such-process"),
                },
            }
        },
        "/processes/{processID}/execution": {
            "post": {
                "operationId": "execute",
                "security": AUTH,
                "parameters": [_path_param("processID")],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": f"{SCHEMAS}/execute.yaml"}}
                    },
                },
                "responses": {
                    "201": {
                        **_json("the job, started asynchronously", "statusInfo.yaml"),
                        "headers": {
                            "Location": {
                                "schema": {"type": "string"},
                                "description": "the job's URL",
                            }
                        },
                    },
                    "400": _problem("invalid inputs"),
                    "404": _problem("no-such-process"),
                },
            }
        },
    }


def _job_paths() -> dict[str, Any]:
    return {
        "/jobs": {
            "get": {
                "operationId": "getJobs",
                "security": AUTH,
                "parameters": _job_list_parameters(),
                "responses": {"200": _json("the jobs", "jobList.yaml")},
            }
        },
        "/jobs/{jobID}": {
            "get": {
                "operationId": "getStatus",
                "security": AUTH,
                "parameters": [_path_param("jobID")],
                "responses": {
                    "200": _json("the job's status", "statusInfo.yaml"),
                    "404": _problem("no-such-job"),
                },
            },
            "delete": {
                "operationId": "dismiss",
                "security": AUTH,
                "parameters": [_path_param("jobID")],
                "responses": {
                    "200": _json("the job, dismissed", "statusInfo.yaml"),
                    "404": _problem("no-such-job"),
                },
            },
        },
        "/jobs/{jobID}/results": {
            "get": {
                "operationId": "getResult",
                "security": AUTH,
                "parameters": [_path_param("jobID")],
                "responses": {
                    "200": _json("the results", "results.yaml"),
                    "404": _problem("no-such-job or result-not-ready"),
                    "500": _problem("the job failed: its exception"),
                },
            }
        },
    }


def _job_list_parameters() -> list[dict[str, Any]]:
    return [
        _query("processID", {"type": "string"}, "only jobs of these processes"),
        _query(
            "status",
            {
                "type": "string",
                "enum": [
                    "accepted",
                    "running",
                    "successful",
                    "failed",
                    "dismissed",
                ],
            },
            "only jobs in these states",
        ),
        _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "page size"),
        _query("offset", {"type": "integer", "minimum": 0}, "from the next link"),
    ]
