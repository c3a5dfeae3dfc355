"""Drawing a `Timeline` to PNG or SVG with matplotlib (no pyplot: no global state, no display)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import cast

import numpy as np
from matplotlib import dates
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from compactor.domain.segments import Segment, SegmentState
from compactor.errors import ConfigError
from compactor.observe.pictures.timeline import Timeline

FORMATS = (".png", ".svg")
RECENT_EDGE = "#d62728"
HATCH = {SegmentState.LOADING: "//", SegmentState.REFRESHING: "xx"}
PARTLY_SETTLED = ".."  # ONLINE, but some sub-partition is still loading or refreshing
BOX_HEIGHT = 0.7


def day_number(moment: datetime) -> float:
    """matplotlib's number for a date (its own conversion carries no type annotations)."""
    return cast(float, dates.date2num(moment))  # type: ignore[no-untyped-call]


def hatch(segment: Segment) -> str:
    if segment.state in HATCH:
        return HATCH[segment.state]
    return PARTLY_SETTLED if segment.sub_partition_states else ""


def save(timeline: Timeline, out: Path) -> None:
    """Write the picture; the format follows the file's suffix. The image's Title and
    Description metadata say what it shows, segment count included."""
    if out.suffix.lower() not in FORMATS:
        raise ConfigError(
            f"--out {out}: write a {' or '.join(FORMATS)} file, not {out.suffix or 'no suffix'!r}"
        )
    figure = Figure(figsize=(12, 1.6 + 0.6 * max(len(timeline.rows), 1)), layout="constrained")
    axes = figure.add_subplot()
    sizes = [max(b.segment.bytes, 1) for b in timeline.boxes] or [1]
    norm = LogNorm(vmin=min(sizes), vmax=max(max(sizes), min(sizes) * 10))
    colours = ScalarMappable(norm=norm, cmap="viridis")
    faces = colours.to_rgba(np.array(sizes, dtype=float))
    for box, face in zip(timeline.boxes, faces, strict=False):
        start, end = day_number(box.segment.range.start), day_number(box.segment.range.end)
        axes.add_patch(
            Rectangle(
                (start, box.row - BOX_HEIGHT / 2),
                end - start,
                BOX_HEIGHT,
                facecolor=face,
                hatch=hatch(box.segment),
                edgecolor=RECENT_EDGE if box.recent else "black",
                linewidth=2.5 if box.recent else 0.5,
            )
        )
    if timeline.boxes:
        axes.set_xlim(
            day_number(min(b.segment.range.start for b in timeline.boxes)),
            day_number(max(b.segment.range.end for b in timeline.boxes)),
        )
    axes.set_ylim(-0.6, len(timeline.rows) - 0.4)
    axes.set_yticks(range(len(timeline.rows)), timeline.rows)
    axes.xaxis_date()
    axes.set_xlabel("event time (UTC)")
    axes.set_title(timeline.describe(), fontsize=10)
    figure.colorbar(colours, ax=axes, label="segment bytes")
    figure.legend(handles=_legend(timeline), loc="outside lower center", ncols=4, fontsize=8)
    description = timeline.describe()
    figure.savefig(
        out, metadata={"Title": f"compactor timeline: {timeline.table}", "Description": description}
    )


def _legend(timeline: Timeline) -> list[Patch]:
    hours = timeline.recent.total_seconds() / 3600
    handles = [
        Patch(facecolor="white", edgecolor="black", label=f"segment ({len(timeline.boxes)})"),
        Patch(
            facecolor="white",
            edgecolor=RECENT_EDGE,
            linewidth=2.5,
            label=f"merged in the last {hours:g} h ({timeline.recently_merged})",
        ),
    ]
    found = {hatch(b.segment) for b in timeline.boxes} - {""}
    names = {**{h: str(state) for state, h in HATCH.items()}, PARTLY_SETTLED: "sub-partition not ONLINE"}
    handles += [Patch(facecolor="white", edgecolor="black", hatch=h, label=names[h]) for h in sorted(found)]
    return handles
