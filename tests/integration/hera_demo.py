"""The demo pipeline (examples/eo-pipeline.yaml) written with Hera, as a scientist who keeps
their workflows in Python would write it; the scripts' source is the example's own. The
scientist guide shows this function ("Submit with Hera or the argo CLI")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hera.workflows import (
    DAG,
    Artifact,
    Parameter,
    Resources,
    S3Artifact,
    Script,
    Task,
    Workflow,
    WorkflowsService,
)
from hera.workflows.models import ValueFrom

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "eo-pipeline.yaml"
SCENE = "s3://eo-archive/sentinel2/l1c/T31UDQ/S2B_MSIL1C_20240612T105619.SAFE"


def sources() -> dict[str, str]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    return {t["name"]: t["script"]["source"] for t in doc["spec"]["templates"] if "script" in t}


def eo_pipeline(service: WorkflowsService, annotations: dict[str, str] | None = None) -> Workflow:
    """``annotations``: added to every step's template (the sandbox reads its knobs there)."""
    src = sources()
    extra: dict[str, Any] = dict(annotations or {})
    with Workflow(
        generate_name="eo-pipeline-",
        namespace="eo-demo",
        entrypoint="pipeline",
        labels={"app": "eo-pipeline"},
        workflows_service=service,
        arguments=[
            Parameter(name="scene-uri", value=SCENE),
            Parameter(
                name="model",
                value="cloud-segmentation-v3",
                enum=["cloud-segmentation-v3", "land-cover-v2"],
            ),
        ],
    ) as workflow:
        ingest_template(src, extra)
        preprocess_template(src, extra)
        inference_template(src, extra)
        pipeline_dag()
    return workflow


def ingest_template(src: dict[str, str], extra: dict[str, Any]) -> None:
    """The ingest step's script template, in the workflow being defined."""
    Script(
        name="ingest",
        image="python:3",
        command=["python"],
        source=src["ingest"],
        annotations={"portal.multisite.io/datasets": "sentinel2-l1c", **extra},
        inputs=[
            Parameter(name="scene-uri"),
            S3Artifact(
                name="scene",
                path="/in/scene",
                key="sentinel2/l1c/T31UDQ/S2B_MSIL1C_20240612T105619.SAFE",
            ),
        ],
        outputs=[
            Parameter(name="tile-count", value_from=ValueFrom(path="/out/tile-count")),
            Artifact(name="tiles", path="/out/tiles"),
        ],
        resources=Resources(cpu_request="2", memory_request="4Gi"),
    )


def preprocess_template(src: dict[str, str], extra: dict[str, Any]) -> None:
    """The preprocess step's script template, in the workflow being defined."""
    Script(
        name="preprocess",
        image="python:3",
        command=["python"],
        source=src["preprocess"],
        annotations=extra,
        inputs=[Parameter(name="tile-count"), Artifact(name="tiles", path="/in/tiles")],
        outputs=[Artifact(name="patches", path="/out/patches")],
        resources=Resources(cpu_request="8", memory_request="16Gi"),
    )


def inference_template(src: dict[str, str], extra: dict[str, Any]) -> None:
    """The inference step's script template, in the workflow being defined."""
    Script(
        name="inference",
        image="python:3",
        command=["python"],
        source=src["inference"],
        annotations=extra,
        inputs=[
            Parameter(name="model"),
            Parameter(name="patches-checksum"),
            Artifact(name="patches", path="/in/patches"),
        ],
        outputs=[Artifact(name="masks", path="/out/masks")],
        resources=Resources(cpu_request="4", memory_request="24Gi", gpus=1),
    )


def pipeline_dag() -> None:
    """The DAG: ingest, then preprocess, then inference, each passing on its outputs."""
    with DAG(name="pipeline"):
        ingest = Task(
            name="ingest",
            template="ingest",
            arguments=[Parameter(name="scene-uri", value="{{workflow.parameters.scene-uri}}")],
        )
        preprocess = Task(
            name="preprocess",
            template="preprocess",
            arguments=[
                Parameter(
                    name="tile-count",
                    value="{{tasks.ingest.outputs.parameters.tile-count}}",
                ),
                Artifact(name="tiles", from_="{{tasks.ingest.outputs.artifacts.tiles}}"),
            ],
        )
        inference = Task(
            name="inference",
            template="inference",
            arguments=[
                Parameter(name="model", value="{{workflow.parameters.model}}"),
                Parameter(name="patches-checksum", value="{{tasks.preprocess.outputs.result}}"),
                Artifact(name="patches", from_="{{tasks.preprocess.outputs.artifacts.patches}}"),
            ],
        )
        ingest >> preprocess
        preprocess >> inference
