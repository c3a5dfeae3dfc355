"""A table's timeline as inline SVG for the console: event time across, one lane per level and
sub-partition set, each segment a box (its id and range in a tooltip); recent merges' outputs
outlined, segments in merges in flight dashed, segments not ONLINE hatched. Every text is
escaped."""

from __future__ import annotations

from collections.abc import Collection

from markupsafe import Markup, escape

from compactor.domain.segments import SegmentState
from compactor.observe.pictures.timeline import Timeline

WIDTH = 960
LABEL = 110  # the lanes' labels
LANE = 28
BOX = 20
PALETTE = ("#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")


def timeline_svg(timeline: Timeline, running: Collection[str] = ()) -> Markup:
    if not timeline.boxes:
        return Markup('<p class="empty">no segments</p>')
    start = min(b.segment.range.start for b in timeline.boxes)
    end = max(b.segment.range.end for b in timeline.boxes)
    span = max((end - start).total_seconds(), 1.0)
    scale = (WIDTH - LABEL - 10) / span
    height = LANE * len(timeline.rows) + 24
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(timeline.describe())}">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#555" stroke-width="2"/>'
        "</pattern></defs>",
    ]
    for i, label in enumerate(timeline.rows):
        y = i * LANE + LANE / 2 + 4
        parts.append(f'<text x="4" y="{y:.0f}" class="lane">{escape(label)}</text>')
    for box in timeline.boxes:
        s = box.segment
        x = LABEL + (s.range.start - start).total_seconds() * scale
        w = max(2.0, (s.range.end - s.range.start).total_seconds() * scale - 1)
        y = box.row * LANE + (LANE - BOX) / 2
        classes = ["segment"]
        if box.recent:
            classes.append("recent")
        if s.id in running:
            classes.append("running")
        fill = PALETTE[min(s.level, len(PALETTE) - 1)]
        title = (
            f"{s.id}: {s.range.start.isoformat()} .. {s.range.end.isoformat()}, {s.bytes} bytes, {s.state}"
        )
        parts.append(
            f'<g class="{" ".join(classes)}" data-segment="{escape(s.id)}">'
            f"<title>{escape(title)}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{BOX}" fill="{fill}"/>'
            + (
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{BOX}" fill="url(#hatch)"/>'
                if s.state is not SegmentState.ONLINE
                else ""
            )
            + "</g>"
        )
    axis_y = LANE * len(timeline.rows) + 16
    parts.append(f'<text x="{LABEL}" y="{axis_y}" class="axis">{escape(start.isoformat())}</text>')
    parts.append(
        f'<text x="{WIDTH - 10}" y="{axis_y}" class="axis" text-anchor="end">{escape(end.isoformat())}</text>'
    )
    parts.append("</svg>")
    return Markup("".join(parts))
