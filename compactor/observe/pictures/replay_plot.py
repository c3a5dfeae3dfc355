"""The segment count over a replay, per config, as PNG, SVG or a self-contained HTML page."""

from __future__ import annotations

import io
from html import escape
from pathlib import Path

from matplotlib.figure import Figure

from compactor.errors import ConfigError
from compactor.observe.pictures.timeline_plot import day_number
from compactor.rules.what_if import WhatIf

FORMATS = (".png", ".svg", ".html")


def save(runs: dict[str, WhatIf], out: Path) -> None:
    """Draw each run's segment count after every load; the format follows `out`'s suffix."""
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(
            f"--plot {out}: the picture is written as {', '.join(FORMATS)}, not {suffix or 'no suffix'}"
        )
    fig = Figure(figsize=(10, 5), dpi=110)
    ax = fig.add_subplot()
    for name, run in runs.items():
        label = f"{name}: {len(run.merges)} merges, write amplification {run.write_amplification:.2f}x"
        ax.step([day_number(t) for t, _ in run.counts], [n for _, n in run.counts], where="post", label=label)
    ax.xaxis_date()
    ax.set_xlabel("load time")
    ax.set_ylabel("segments")
    ax.set_title("Replay: live segments after each load")
    ax.legend(loc="upper left")
    fig.autofmt_xdate()
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix != ".html":
        fig.savefig(out)
        return
    svg = io.StringIO()
    fig.savefig(svg, format="svg")
    rows = "".join(
        f"<tr><td>{escape(name)}</td><td>{len(run.merges)}</td><td>{run.write_amplification:.2f}x</td>"
        f"<td>{max((n for _, n in run.counts), default=0)}</td></tr>"
        for name, run in runs.items()
    )
    out.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>compactor replay</title></head><body>"
        "<h1>What-if replay</h1><table border='1'><tr><th>config</th><th>merges</th>"
        f"<th>write amplification</th><th>max segments</th></tr>{rows}</table>{svg.getvalue()}</body></html>"
    )
