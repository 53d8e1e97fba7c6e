"""Values read off a published chart, repeatably: a figure file from the authors' repository, a spec that names its
axis ticks and its series' colours, and a reading with its uncertainty.

A spec (YAML, ``src/fed/reporting/data/digitised/<name>.yaml``) gives

- ``image`` (the PNG beside it), its ``source`` (repository, commit, path) and ``sha256`` (checked before reading);
- ``y_ticks``: the values of the horizontal gridlines, bottom to top, and ``grid_colour``; the gridlines' pixel rows
  are found in the image (rows mostly of that colour) and fitted linearly to the values;
- ``kind: bars``: ``groups`` (the x categories, left to right) and ``series`` (name and RGB colour of each bar of a
  group, left to right, as in the legend); each bar is a run of columns of its colour below the plot's top, its top
  the first row of that colour;
- ``scale`` (e.g. 100: fractions to percent) and the rows' ``paper``, ``table``, ``dataset``, ``metric``,
  ``partition`` (a pattern with ``{group}``) and ``methods`` (series → our method name).

- ``kind: lines``: the plot's frame (``axes_colour``), its ``x_ticks`` and ``y_ticks`` (the tick marks outside the
  frame are found and fitted; a mark hidden under a line is skipped), ``x_values`` (first and last x read, one per
  integer) and ``series`` (name, RGB colour); each line is followed column by column, and its best value is the
  paper value (the per-point curve goes to ``<spec>.points.csv``).

``python -m fed.reporting.digitise <paper>`` reads every spec of a paper (``<paper>_*.yaml``) into
``src/fed/reporting/data/<paper>.csv``, the paper values the tables compare with.

The uncertainty of a read value is one pixel (an anti-aliased edge lies within a pixel of the first full row)
plus the largest residual of the gridline fit, both in the value's units.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml


@dataclass(frozen=True)
class Calibration:
    """value = slope · row + intercept (rows grow downwards, so the slope is negative)."""

    slope: float
    intercept: float
    residual: float  # the largest |fit − tick value| over the gridlines

    def value(self, row: float) -> float:
        return self.slope * row + self.intercept

    @property
    def per_pixel(self) -> float:
        return abs(self.slope)


def colour_mask(image: np.ndarray, colour, tolerance: int = 12) -> np.ndarray:
    """Pixels within ``tolerance`` of ``colour`` in every channel."""
    return (np.abs(image[..., :3].astype(int) - np.asarray(colour, dtype=int)) <= tolerance).all(-1)


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of every run of True in a 1-d array."""
    padded = np.concatenate([[False], flags, [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


def gridline_rows(image: np.ndarray, colour, min_fraction: float = 0.2) -> list[float]:
    """Centre rows of the horizontal lines of ``colour`` across at least ``min_fraction`` of the width (bars hide
    the rest), top to bottom; a line across the whole width is the chart's frame, not a gridline."""
    fraction = colour_mask(image, colour).mean(1)
    return [(a + b) / 2 for a, b in runs((fraction >= min_fraction) & (fraction < 0.99))]


def calibrate(rows: list[float], ticks: list[float]) -> Calibration:
    """Least-squares line through (row, tick value); ``rows`` top to bottom, ``ticks`` bottom to top."""
    if len(rows) != len(ticks):
        raise ValueError(f"found {len(rows)} gridlines for {len(ticks)} ticks {ticks}: check grid_colour and y_ticks")
    r, v = np.asarray(rows, float), np.asarray(ticks[::-1], float)
    slope, intercept = np.polyfit(r, v, 1)
    return Calibration(float(slope), float(intercept), float(np.abs(slope * r + intercept - v).max()))


def bar_tops(image: np.ndarray, colour, min_width: int = 5) -> list[tuple[float, int]]:
    """(centre column, top row) of every bar of ``colour``, left to right: runs of columns holding at least
    ``min_width`` pixels of it vertically, wider than ``min_width`` (legend swatches are read too: drop them by
    position)."""
    mask = colour_mask(image, colour)
    columns = mask.sum(0) >= min_width
    out = []
    for a, b in runs(columns):
        if b - a + 1 < min_width:
            continue
        rows = np.flatnonzero(mask[:, a : b + 1].any(1))
        out.append(((a + b) / 2, int(rows.min())))
    return out


def axes_box(image: np.ndarray, colour=(0, 0, 0), min_fraction: float = 0.5) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) of a plot's frame: the outermost rows and columns mostly of ``colour``."""
    mask = colour_mask(image, colour, 60)
    rows, cols = np.flatnonzero(mask.mean(1) >= min_fraction), np.flatnonzero(mask.mean(0) >= min_fraction)
    if len(rows) < 2 or len(cols) < 2:
        raise ValueError("no plot frame found: check axes_colour")
    return int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def tick_marks(image: np.ndarray, box: tuple[int, int, int, int], axis: str, colour=(0, 0, 0)) -> list[float]:
    """Centres of the tick marks outside the frame: below the bottom edge (``axis="x"``, columns) or left of the
    left edge (``"y"``, rows), 3 pixels long."""
    top, bottom, left, right = box
    mask = colour_mask(image, colour, 60)
    if axis == "x":
        marks = mask[bottom + 1 : bottom + 4].all(0)
        marks[: left - 1], marks[right + 2 :] = False, False
    else:
        marks = mask[:, left - 3 : left].all(1)
        marks[: top - 1], marks[bottom + 2 :] = False, False
    return [(a + b) / 2 for a, b in runs(marks)]


def calibrate_marks(marks: list[float], ticks: list[float], descending: bool = False) -> Calibration:
    """Calibration from evenly spaced tick marks of which some may be hidden (a line drawn over one): each mark
    found is placed by its distance from the first in tick spacings; the first mark is the first tick (in
    ``ticks`` order: left to right, or bottom to top for ``descending`` pixel axes)."""
    marks = sorted(marks, reverse=descending)
    spacing = np.min(np.abs(np.diff(marks)))
    slots = [round(abs(m - marks[0]) / spacing) for m in marks]
    if slots[-1] != len(ticks) - 1:
        raise ValueError(f"tick marks at {marks} span {slots[-1] + 1} ticks, not the spec's {len(ticks)}")
    r, v = np.asarray(marks, float), np.asarray([ticks[k] for k in slots], float)
    slope, intercept = np.polyfit(r, v, 1)
    return Calibration(float(slope), float(intercept), float(np.abs(slope * r + intercept - v).max()))


def trace(
    image: np.ndarray,
    colour,
    columns: list[int],
    box: tuple[int, int, int, int],
    reach: int = 3,
    jump: float = 50.0,
) -> list[tuple[float, float]]:
    """A line of ``colour`` at each of ``columns``: (centre row, half thickness) or (nan, nan) where it is hidden.
    Inside the frame only. The line starts at the lowest run of the first column; after that it is the run nearest
    the row extrapolated from the last two points read (at half their slope: curves flatten), if within ``jump``
    pixels of it per column since the last point (three times that after the first point); otherwise it is hidden
    there, so a legend swatch or text of the same colour is never taken for the line. Dashes are bridged by looking
    up to ``reach`` columns aside."""
    top, bottom, left, right = box
    mask = colour_mask(image, colour)
    mask[: top + 2], mask[bottom - 1 :], mask[:, : left + 2], mask[:, right - 1 :] = False, False, False, False
    out, read = [], []  # read: (index, row) of the points found
    for i, c in enumerate(columns):
        found = []
        for d in range(reach + 1):
            found = runs(mask[:, max(c - d, 0) : c + d + 1].any(1))
            if found:
                break
        centres = [((a + b) / 2, (b - a + 1) / 2) for a, b in found]
        if read:
            (i1, r1), gap = read[-1], i - read[-1][0]
            slope = (r1 - read[-2][1]) / (i1 - read[-2][0]) if len(read) > 1 else 0.0
            expected, allowed = r1 + 0.5 * slope * gap, jump * gap * (1 if len(read) > 1 else 3)
            centres = sorted(
                (p for p in centres if abs(p[0] - expected) <= allowed), key=lambda p: abs(p[0] - expected)
            )
        if not centres:
            out.append((math.nan, math.nan))
            continue
        best = centres[0] if read else centres[-1]
        out.append(best)
        read.append((i, best[0]))
    return out


def _load(spec_path: Path) -> tuple[dict, np.ndarray]:
    from PIL import Image

    spec = yaml.safe_load(Path(spec_path).read_text())
    image_path = Path(spec_path).parent / spec["image"]
    digest = hashlib.sha256(image_path.read_bytes()).hexdigest()
    if digest != spec["sha256"]:
        raise ValueError(f"{image_path}: sha256 {digest} is not the spec's {spec['sha256']}")
    return spec, np.asarray(Image.open(image_path).convert("RGB"))


def _row(spec: dict, partition: str, series: str, value: float, uncertainty: float) -> dict:
    return {
        "paper": spec["paper"],
        "table": spec["table"],
        "dataset": spec["dataset"],
        "partition": partition,
        "scarcity": "",
        "method": spec["methods"][series],
        "metric": spec["metric"],
        "value": round(value, 2),
        "std": "",
        "notes": f"read from a figure: {spec['source']['repository']} {spec['source']['path']}",
        "read_uncertainty": round(uncertainty, 2),
    }


def read_bars(spec: dict, image: np.ndarray) -> list[dict]:
    cal = calibrate(gridline_rows(image, spec["grid_colour"]), spec["y_ticks"])
    bottom = max(gridline_rows(image, spec["grid_colour"]))
    scale = spec.get("scale", 1.0)
    uncertainty = (cal.per_pixel + cal.residual) * scale
    rows = []
    for series in spec["series"]:
        bars = [(x, top) for x, top in bar_tops(image, series["colour"]) if top < bottom]  # legend swatches: below
        if len(bars) != len(spec["groups"]):
            raise ValueError(f"{len(bars)} bars of {series['name']} for {len(spec['groups'])} groups: check its colour")
        for group, (_, top) in zip(spec["groups"], bars):
            rows.append(_row(spec, spec["partition"].format(group=group), series["name"], cal.value(top) * scale,
                             uncertainty))  # fmt: skip
    return rows


def read_lines(spec: dict, image: np.ndarray) -> tuple[list[dict], list[dict]]:
    """(paper-value rows: each line's best value over ``x_values``, the curve points behind them). A point's
    uncertainty is the line's half thickness plus a pixel plus the tick fit's residual."""
    box = axes_box(image, spec.get("axes_colour", (0, 0, 0)))
    cx = calibrate_marks(tick_marks(image, box, "x"), spec["x_ticks"])
    cy = calibrate_marks(tick_marks(image, box, "y"), spec["y_ticks"], descending=True)
    xs = list(range(spec["x_values"][0], spec["x_values"][1] + 1))
    columns = [round((x - cx.intercept) / cx.slope) for x in xs]
    scale = spec.get("scale", 1.0)
    rows, points = [], []
    for series in spec["series"]:
        line = trace(image, series["colour"], columns, box)
        read = [(x, cy.value(r) * scale, (h + 1) * cy.per_pixel * scale + cy.residual * scale)
                for x, (r, h) in zip(xs, line) if math.isfinite(r)]  # fmt: skip
        if len(read) < len(xs) / 2:
            raise ValueError(f"{series['name']}: read at {len(read)} of {len(xs)} x values: check its colour")
        points += [{"series": series["name"], "x": x, "value": round(v, 2), "read_uncertainty": round(u, 2)}
                   for x, v, u in read]  # fmt: skip
        x_best, best, u_best = max(read, key=lambda p: p[1])
        rows.append(_row(spec, spec["partition"], series["name"], best, u_best))
    return rows, points


def read_points(spec_path: Path) -> list[dict] | None:
    """The points read along a line chart's curves (series, x, value, read_uncertainty); None for bars."""
    spec, image = _load(spec_path)
    return read_lines(spec, image)[1] if spec["kind"] == "lines" else None


def read_spec(spec_path: Path) -> list[dict]:
    """Rows of paper values (the columns of ``src/fed/reporting/data/<paper>.csv`` plus ``read_uncertainty``)
    read from the chart a spec describes (``kind: bars`` or ``lines``)."""
    spec, image = _load(spec_path)
    if spec["kind"] == "bars":
        return read_bars(spec, image)
    if spec["kind"] == "lines":
        return read_lines(spec, image)[0]
    raise ValueError(f"{spec_path}: kind {spec['kind']!r} is not supported (bars, lines)")


SPECS = Path(__file__).parent / "data" / "digitised"
COLUMNS = ("paper", "table", "dataset", "partition", "scarcity", "method", "metric", "value", "std", "notes",
           "read_uncertainty")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Read a paper's charts (specs in fed/reporting/data/digitised).")
    parser.add_argument("paper", help="e.g. feddpms: reads digitised/<paper>_*.yaml")
    parser.add_argument("--out", type=Path, help="default: fed/reporting/data/<paper>.csv")
    args = parser.parse_args(argv)
    specs = sorted(SPECS.glob(f"{args.paper}_*.yaml"))
    if not specs:
        raise SystemExit(f"no specs {SPECS}/{args.paper}_*.yaml")
    out = args.out or SPECS.parent / f"{args.paper}.csv"
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
        writer.writeheader()
        for spec in specs:
            writer.writerows(read_spec(spec))
            points = read_points(spec)  # a line chart's curves, committed beside its spec
            if points is not None and args.out is None:
                pd.DataFrame(points).to_csv(spec.with_suffix(".points.csv"), index=False)
    print(f"{out}: values read from {len(specs)} figures")


if __name__ == "__main__":
    main()
