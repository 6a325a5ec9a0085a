"""Draw the scheduler bench's figures as an SVG chart, from the JSON files it wrote.

    python bench/chart.py docs/images/scheduler-bench.svg before=/tmp/pg-before.json \
        after=/tmp/pg-after.json

Two panels, one group of bars per labelled file: throughput as a share of the raw loops
measured in the same run (1 and 2 processes against the claim-only loop; or, from files that
have it, 1 process against the claim-only loop and the claim + outcome loop), and fire
latency (p50, p99). From files that have the CPU figures, a third panel: the CPU one process
spends a run (the scheduler, the database server), with the raw claim + outcome loop of the
last file beside them ("raw loop"). Plain SVG, so the benchmark needs nothing beyond the
standard library.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

WIDTH, PANEL_H, BAR_W, GAP = 1000, 240, 26, 20
COLOURS = ("#4c72b0", "#dd8452")


def bars(
    x0: int,
    title: str,
    unit: str,
    groups: list[tuple[str, list[tuple[str, float]]]],
    decimals: int | None = None,
) -> list[str]:
    """One panel: a group of bars per file, each bar labelled with its value."""
    top = max((v for _, values in groups for _, v in values), default=1.0) or 1.0
    places = (0 if unit else 1) if decimals is None else decimals
    out = [f'<text x="{x0}" y="20" font-weight="bold">{title}</text>']
    x = x0
    for label, values in groups:
        for i, (name, value) in enumerate(values):
            h = value / top * (PANEL_H - 80)
            y = PANEL_H - 36 - h
            out.append(
                f'<rect x="{x}" y="{y:.1f}" width="{BAR_W}" height="{h:.1f}" '
                f'fill="{COLOURS[i % 2]}"><title>{label} {name}</title></rect>'
            )
            out.append(
                f'<text x="{x + BAR_W / 2}" y="{y - 4:.1f}" font-size="10" '
                f'text-anchor="middle">{value:.{places}f}{unit}</text>'
            )
            x += BAR_W
        # One word a line under the group: "MariaDB" over "after" fits a group's width.
        centre = x - len(values) * BAR_W / 2
        lines = "".join(
            f'<tspan x="{centre}" dy="{0 if i == 0 else 12}">{word}</tspan>'
            for i, word in enumerate(label.split())
        )
        out.append(
            f'<text x="{centre}" y="{PANEL_H - 20}" font-size="11" '
            f'text-anchor="middle">{lines}</text>'
        )
        x += GAP
    legend = [name for name, _ in groups[0][1]] if groups else []
    for i, name in enumerate(legend):
        lx = x0 + 270 + i * 100  # beside the title, above the tallest bar's label
        out.append(
            f'<rect x="{lx}" y="11" width="10" height="10" fill="{COLOURS[i % 2]}"/>'
            f'<text x="{lx + 14}" y="20" font-size="11">{name}</text>'
        )
    return out


def chart(files: list[tuple[str, dict[str, Any]]]) -> str:
    throughput, latency, cpu = [], [], []
    title = "Throughput, % of the raw claim loop"
    for label, data in files:
        med = data["medians"]
        ratios = med.get("ratios")
        if ratios and "one_of_raw_outcome" in ratios:
            # One process against both raw loops of the same run.
            title = "Throughput, 1 process, % of the raw loops"
            throughput.append(
                (
                    label,
                    [
                        ("claim only", ratios["one_of_raw"] * 100),
                        ("claim + outcome", ratios["one_of_raw_outcome"] * 100),
                    ],
                )
            )
        elif ratios:
            throughput.append(
                (
                    label,
                    [
                        ("1 process", ratios["one_of_raw"] * 100),
                        ("2 processes", ratios["two_of_raw"] * 100),
                    ],
                )
            )
        if "lat" in med:
            latency.append((label, [("p50", med["lat"]["p50_ms"]), ("p99", med["lat"]["p99_ms"])]))
        if "server_cpu_us_per_run" in med.get("one", {}):
            one = med["one"]
            cpu.append(
                (
                    label,
                    [
                        ("process", one["cpu_us_per_run"]),
                        ("server", one["server_cpu_us_per_run"]),
                    ],
                )
            )
    if cpu:
        rec = files[-1][1]["medians"]["rec1"]
        cpu.append(
            (
                "raw loop",
                [("process", rec["cpu_us_per_run"]), ("server", rec["server_cpu_us_per_run"])],
            )
        )
    panel = WIDTH // 2
    width = panel * (3 if cpu else 2)
    body = bars(10, title, "%", throughput)
    body += bars(panel + 10, "Fire latency, ms", "", latency)
    if cpu:
        body += bars(2 * panel + 10, "CPU a run, 1 process, µs", "", cpu, decimals=0)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{PANEL_H}" '
        'font-family="sans-serif" font-size="12">'
        f'<rect width="{width}" height="{PANEL_H}" fill="white"/>' + "".join(body) + "</svg>\n"
    )


def main() -> None:
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    files = []
    for arg in sys.argv[2:]:
        label, _, path = arg.rpartition("=")
        files.append((label or Path(path).stem, json.loads(Path(path).read_text())))
    Path(sys.argv[1]).write_text(chart(files))


if __name__ == "__main__":
    main()
