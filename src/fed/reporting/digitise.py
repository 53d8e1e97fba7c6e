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

``python -m fed.reporting.digitise`` reads every spec of a paper (``<paper>_*.yaml``) into
``src/fed/reporting/data/<paper>.csv``, the paper values the tables compare with.

The uncertainty of a read value is one pixel (an anti-aliased edge lies within a pixel of the first full row)
plus the largest residual of the gridline fit, both in the value's units.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
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


def read_spec(spec_path: Path) -> list[dict]:
    """Rows of paper values (the columns of ``src/fed/reporting/data/<paper>.csv`` plus ``read_uncertainty``)
    read from the chart a spec describes."""
    from PIL import Image

    spec = yaml.safe_load(Path(spec_path).read_text())
    image_path = Path(spec_path).parent / spec["image"]
    digest = hashlib.sha256(image_path.read_bytes()).hexdigest()
    if digest != spec["sha256"]:
        raise ValueError(f"{image_path}: sha256 {digest} is not the spec's {spec['sha256']}")
    image = np.asarray(Image.open(image_path).convert("RGB"))
    cal = calibrate(gridline_rows(image, spec["grid_colour"]), spec["y_ticks"])
    bottom = max(gridline_rows(image, spec["grid_colour"]))
    scale = spec.get("scale", 1.0)
    uncertainty = (cal.per_pixel + cal.residual) * scale
    if spec["kind"] != "bars":
        raise ValueError(f"{spec_path}: kind {spec['kind']!r} is not supported (bars)")
    rows = []
    for series in spec["series"]:
        bars = [(x, top) for x, top in bar_tops(image, series["colour"]) if top < bottom]  # legend swatches: below
        if len(bars) != len(spec["groups"]):
            raise ValueError(
                f"{spec_path}: {len(bars)} bars of {series['name']} for {len(spec['groups'])} groups: check its colour"
            )
        for group, (_, top) in zip(spec["groups"], bars):
            rows.append(
                {
                    "paper": spec["paper"],
                    "table": spec["table"],
                    "dataset": spec["dataset"],
                    "partition": spec["partition"].format(group=group),
                    "scarcity": "",
                    "method": spec["methods"][series["name"]],
                    "metric": spec["metric"],
                    "value": round(cal.value(top) * scale, 2),
                    "std": "",
                    "notes": f"read from a figure: {spec['source']['repository']} {spec['source']['path']}",
                    "read_uncertainty": round(uncertainty, 2),
                }
            )
    return rows


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
    print(f"{out}: values read from {len(specs)} figures")


if __name__ == "__main__":
    main()
