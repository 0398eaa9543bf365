"""The demo's charts are real PNG files whose pixels show the report's figures."""

from pathlib import Path

from PIL import Image

from tidegate.cli.demo_charts import COLORS, write_charts
from tidegate.cli.demo_report import DemoRecord, UsageSample, WorkloadRecord

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def a_day() -> DemoRecord:
    record = DemoRecord(total_gpus=64, day_length=2400)
    for step in range(48):
        at = step * 50.0
        daytime = 600 <= at < 1800
        record.sample_usage(
            UsageSample(
                at=at,
                running={"inference": 40 if daytime else 8, "training": 16 if daytime else 56},
                gated={"inference": 8 if daytime else 0},
            )
        )
    record.workloads["ns/a"] = WorkloadRecord(
        key="ns/a", kind="Job", queue="q", pods=2, gpus_per_pod=8, submitted_at=0.0
    )
    record.workloads["ns/a"].admitted_at.append(30.0)
    return record


def pixels_near(image: Image.Image, color: str) -> int:
    """How many pixels are within a small distance of ``color`` (alpha blending shifts it)."""
    target = tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))
    rgb = image.convert("RGB")
    histogram = rgb.getcolors(maxcolors=rgb.width * rgb.height) or []
    return sum(
        count
        for count, pixel in histogram
        if sum(abs(int(a) - b) for a, b in zip(pixel, target, strict=True)) < 60
    )


def test_charts_are_png_files_that_show_the_usage(tmp_path: Path) -> None:
    charts = write_charts(a_day(), tmp_path)
    assert set(charts.values()) == {"gpu-use.png", "waits.png", "placement.png"}
    for name in charts.values():
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE), name
        with Image.open(tmp_path / name) as image:
            image.verify()
    with Image.open(tmp_path / "gpu-use.png") as image:
        assert image.size[0] >= 800
        # Both service types fill a visible area of the chart.
        assert pixels_near(image, COLORS["inference"]) > 5000
        assert pixels_near(image, COLORS["training"]) > 5000


def test_an_empty_run_draws_no_usage(tmp_path: Path) -> None:
    write_charts(DemoRecord(total_gpus=64), tmp_path)
    with Image.open(tmp_path / "gpu-use.png") as image:
        assert pixels_near(image, COLORS["training"]) < 500
