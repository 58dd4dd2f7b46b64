"""Pictures of a run for the pages, as plain SVG: the DAG (``DagDrawing``) and the per-site
timeline (``Timeline``), each built from the units and the fleet's colours and drawn by its
``render()``. The template tags (``portal.templatetags.portal_ui``) only call them."""

from portal.drawing.dag import DagDrawing
from portal.drawing.groups import PHASES, Group, group_units
from portal.drawing.timeline import Timeline, format_offset, size_text

__all__ = ["PHASES", "DagDrawing", "Group", "Timeline", "format_offset", "group_units", "size_text"]
