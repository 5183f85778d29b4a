"""The experiments users run: `vdla layers` and `vdla roofline` (on a subset of layers, kept fast)."""

from __future__ import annotations

import csv
import json

import pytest

from vdla.cli import main
from vdla.zoo.resnet import layer_case, layer_specs


@pytest.fixture(autouse=True)
def cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("VDLA_CACHE_DIR", str(tmp_path / "cache"))


def vdla(*argv: str) -> int:
    return main(list(argv))


def test_resnet18_has_the_twelve_distinct_layers():
    specs = layer_specs()
    assert list(specs) == [f"C{i}" for i in range(1, 13)]
    c1, c12 = specs["C1"], specs["C12"]
    assert (c1.c, c1.h, c1.oc, c1.kh, c1.sh, c1.pad, c1.oh) == (3, 224, 64, 7, 2, (3, 3, 3, 3), 112)
    assert (c12.c, c12.h, c12.oc, c12.kh, c12.sh, c12.oh) == (512, 7, 512, 3, 1, 7)
    assert sum(s.macs for s in specs.values()) == 785_956_864  # 118.0M (C1) + 4 x 115.6M + 3 x 57.8M + 12.8M + 3 x 6.4M
    a, b = layer_case("C5", specs["C5"]), layer_case("C5", specs["C5"])
    assert (a.x == b.x).all() and (a.bias == b.bias).all()  # a fixed seed: the same data every run


def test_layers_command_writes_one_record_per_layer(tmp_path, capsys):
    out = tmp_path / "layers.json"
    assert vdla("layers", "--config", "block8", "--layers", "C11", "C12", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["config"] == "block8" and [r["name"] for r in data["layers"]] == ["C11", "C12"]
    for r in data["layers"]:
        assert {"name", "macs", "cycles", "utilization", "gops", "dram_bytes", "intensity", "correct"} <= set(r)
        assert r["correct"] and r["config"] == "block8"
        assert r["gops"] == pytest.approx(2 * r["macs"] * 100.0 / r["cycles"] / 1e3, rel=1e-3)
        assert r["intensity"] == pytest.approx(2 * r["macs"] / r["dram_bytes"], rel=1e-3)
    assert "C12" in capsys.readouterr().out


def test_roofline_command_writes_csv_and_png(tmp_path):
    assert vdla("roofline", "--layers", "C11", "--out", str(tmp_path / "r")) == 0
    rows = list(csv.DictReader((tmp_path / "r" / "roofline.csv").open()))
    assert [(r["layer"], r["latency_hiding"]) for r in rows] == [("C11", "off"), ("C11", "on")]
    off, on = rows
    assert off["vthreads"] == "1" and int(on["cycles"]) < int(off["cycles"])
    assert (tmp_path / "r" / "roofline.png").read_bytes()[:4] == b"\x89PNG"


def test_unknown_layer_is_refused(capsys):
    assert vdla("layers", "--layers", "C13") == 2
    assert "unknown layers ['C13']" in capsys.readouterr().out
