"""The demo report's charts: PNG files drawn with matplotlib (Agg, no display needed).

Each chart is drawn from the report's figures (:mod:`tidegate.cli.demo_report`), never from
anything else, so what a chart shows is what report.json says: GPU use by service type over
time (with the inference pods still held by the gate, and the preemptions), the waits per
queue, and the share of gangs placed inside one domain of each topology level.
"""

from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display, no GUI toolkit

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tidegate.cli.demo_report import (
    DemoRecord,
    gang_locality,
    usage_series,
    waits_per_queue,
)

COLORS = {"inference": "#d95f02", "training": "#1b9e77"}


def write_charts(record: DemoRecord, directory: Path) -> dict[str, str]:
    """Draw every chart into ``directory``; returns title -> file name (for report.md)."""
    charts = {
        "GPU use by service type": ("gpu-use.png", _gpu_use(record)),
        "Waits per queue": ("waits.png", _waits(record)),
        "Gangs placed inside one domain": ("placement.png", _placement(record)),
    }
    written: dict[str, str] = {}
    for title, (name, figure) in charts.items():
        figure.savefig(directory / name, dpi=100)
        plt.close(figure)
        written[title] = name
    return written


def _x_axis(record: DemoRecord) -> tuple[str, float]:
    """The label of the time axis and simulated seconds -> axis units."""
    if record.day_length:
        return "hour of the (compressed) day", 24 / record.day_length
    return "simulated seconds", 1.0


def _gpu_use(record: DemoRecord) -> Figure:
    series = usage_series(record)
    label, factor = _x_axis(record)
    at = series["at"]
    running = series["running"]
    gated = series["gated"]
    assert isinstance(at, list)
    assert isinstance(running, dict)
    assert isinstance(gated, dict)
    x = [float(t) * factor for t in at]
    figure, axes = plt.subplots(figsize=(10, 4.5))
    kinds = list(running)
    if x:
        axes.stackplot(
            x,
            *[running[k] for k in kinds],
            labels=[f"{k} running" for k in kinds],
            colors=[COLORS.get(k, "#7570b3") for k in kinds],
        )
        inference = running.get("inference", [0] * len(x))
        held = gated.get("inference", [0] * len(x))
        if any(held):
            axes.plot(
                x,
                [r + g for r, g in zip(inference, held, strict=True)],
                color=COLORS["inference"],
                linestyle="--",
                label="inference wanted (running + gated)",
            )
    for at_seconds, _, _ in record.preemptions:
        axes.axvline(at_seconds * factor, color="#e7298a", linewidth=0.8, alpha=0.6)
    if record.preemptions:
        axes.plot([], [], color="#e7298a", linewidth=0.8, label="preemption")
    if record.total_gpus:
        axes.axhline(record.total_gpus, color="black", linewidth=0.8, linestyle=":")
        axes.set_ylim(0, record.total_gpus * 1.1)
    axes.set_xlabel(label)
    axes.set_ylabel("GPUs")
    axes.set_title(f"GPU use by service type ({record.total_gpus} GPUs)")
    _legend(axes, "upper left")
    figure.tight_layout()
    return figure


def _waits(record: DemoRecord) -> Figure:
    waits = {q: w for q, w in waits_per_queue(record).items() if w.waits}
    figure, axes = plt.subplots(figsize=(8, 4))
    names = list(waits)
    for index, name in enumerate(names):
        values = waits[name].waits
        axes.scatter([index] * len(values), values, alpha=0.6, color="#7570b3", s=18)
        mean = waits[name].mean
        if mean is not None:
            axes.hlines(
                mean,
                index - 0.3,
                index + 0.3,
                color="black",
                label="mean" if not index else "_nolegend_",
            )
    axes.set_xticks(range(len(names)), names)
    axes.set_ylabel("wait until first admission (simulated s)")
    axes.set_title("Waits per queue")
    _legend(axes, "upper right")
    figure.tight_layout()
    return figure


def _legend(axes: Axes, where: Literal["upper left", "upper right"]) -> None:
    """A legend when something is labelled (matplotlib warns about an empty one)."""
    handles, _ = axes.get_legend_handles_labels()
    if handles:
        axes.legend(loc=where, fontsize="small")


def _placement(record: DemoRecord) -> Figure:
    locality = gang_locality(record)
    figure, axes = plt.subplots(figsize=(8, 4))
    levels = list(locality)
    shares = [locality[level].share * 100 for level in levels]
    bars = axes.bar(range(len(levels)), shares, color="#66a61e")
    for bar, level in zip(bars, levels, strict=True):
        row = locality[level]
        axes.annotate(
            f"{row.inside_one}/{row.gangs}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
        )
    axes.set_xticks(range(len(levels)), levels)
    axes.set_ylim(0, 110)
    axes.set_ylabel("% of gang placements (2+ pods)")
    axes.set_title("Gangs placed inside one domain of each level")
    figure.tight_layout()
    return figure
