"""A one-template task unit as the parser would produce it, for the planner's pure tests: only
what the test varies is given."""

from __future__ import annotations

from placement.parser import Arguments, Resources, Unit


def task_unit(
    name: str,
    upstream: tuple[str, ...] = (),
    *,
    images: tuple[str, ...] = (),
    resources: Resources | None = None,
    datasets: tuple[str, ...] = (),
) -> Unit:
    """Task ``name`` (its template of the same name) depending on ``upstream`` (all of them)."""
    return Unit(
        name=name,
        slug=name,
        kind="task",
        task=name,
        template=name,
        templates=(name,),
        upstream=upstream,
        depends=" && ".join(upstream),
        when=None,
        arguments=Arguments(),
        labels={},
        images=images,
        resources=resources or Resources(),
        datasets=datasets,
        data_refs=(),
    )
