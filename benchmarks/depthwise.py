"""Depthwise convolution mappings on the accelerator, modelled with the cycle model's own parameters.

Every depthwise layer of a suite model (MobileNet-V2 (1.0, 224) by default) is costed under each candidate
mapping; the script prints one row per layer and the totals, and writes JSON with ``--json``:

    python benchmarks/depthwise.py [--model mobilenet_v2 ...] [--config pynq] [--json out/depthwise.json] [--compile]

Candidates (docs/depthwise.md derives each):

* ``blockdiag``: today's GEMM with block-diagonal weights (one 16x16 diagonal per kernel tap): one GEMM
  uop-iteration per (output pixel, channel block, tap), 16 useful MACs of 256. Instructions are costed with
  :class:`vdla.cycles.CycleModel` (one GEMM per channel block and output row).
* ``alu``: the ALU's lanes with the input and the per-channel weights in ACC: per tap and channel block a copy
  (reset ADD), a MUL by the held weight row and an ADD into the sum, each over every output pixel (costed with
  :func:`vdla.cycles.alu_cycles`).
* ``toeplitz``: a planar (channel-major) layout on today's GEMM: per channel, kernel row and 16 output
  columns, one GEMM per 16-aligned block of input columns with a banded Toeplitz weight block.
* ``dw_pos``: a depthwise mode of the GEMM core, the array as 16 output positions x 16 channels (each MAC its
  own input), one tap per cycle; a window buffer of K input-row segments (15*stride + K pixels each) filled
  from INP at one element per cycle, so each segment row is read once per ``stride`` output rows; the 16
  output rows of a segment written to ACC at one row per cycle. Per 16 positions: max(reads, K*K taps, 16
  writes), the three overlapped (double-buffered window and sums).
* ``dw_pos2``: the same with INP read two elements per cycle (two banks), the hardware alternative.
* ``dw_tap``: a depthwise mode reducing over taps through the GEMM core's adder tree (lanes = 16 channels,
  columns = up to 16 taps), fed by a K-line buffer: per output pixel max(stride^2 reads, ceil(K*K / 16)
  passes, 1 write).
* ``dw_tap8``: ``dw_tap`` with each DSP pair computing one product (8 taps per pass), as the part's DSPs allow.
* ``dw_col``: ``dw_tap8`` fed by a K x K window register (no line buffer): along an output row the window
  shifts by ``stride`` columns, reading stride * K INP rows per output pixel.
* ``dw_mode``: the depthwise mode as implemented (EPI dw): ``dw_col`` with a pixel's passes overlapping the next
  pixel's reads (from a snapshot of the window), timed by :class:`vdla.cycles.CycleModel` itself.

``--compile`` also compiles every layer with :func:`vdla.compiler.depthwise.compile_depthwise` (a per-channel
multiplier and a ReLU6 clamp, as MobileNet's layers have) and reports the cycles of the program it picks on the
timing-only simulator: DRAM transfers, tiles, virtual threads and the epilogue's MUL pass included.

Each layer's stand-alone cycles are max(compute, DRAM) where DRAM is its input, output and weight bytes over
the bus width (virtual threads overlap them); ``fused`` is the compute alone, as inside a fused block whose
intermediates stay on chip. Resources (docs/depthwise.md): ``dw_pos`` keeps the core's DSP pairs (a pair shares
the tap's weight instead of the input) but needs a sum per MAC; ``dw_tap`` needs a multiplier per MAC (256 DSP48,
the part has 220); ``dw_tap8`` keeps the core's multipliers and adder tree.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from vdla.compiler.depthwise import compile_depthwise
from vdla.config import DEFAULT_PRESET, HwConfig, load_config
from vdla.cycles import CycleModel, alu_cycles
from vdla.graph.epilogue import Epilogue
from vdla.isa import AluInsn, AluOp, EpiInsn, GemmInsn
from vdla.zoo.suite import SUITE


@dataclass(frozen=True)
class DwLayer:
    """One depthwise convolution: channels, input size, square kernel, stride, padding (per side)."""

    name: str
    channels: int
    h: int
    w: int
    k: int
    stride: int
    pad: int

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad - self.k) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad - self.k) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.channels * self.oh * self.ow * self.k * self.k


def depthwise_layers(model) -> list[DwLayer]:
    """The depthwise convolutions (group == input channels == output channels) of an ONNX model, in order."""
    import onnx
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(model)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (*inferred.graph.value_info, *inferred.graph.input)
    }
    layers = []
    for node in inferred.graph.node:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        if node.op_type != "Conv" or int(a.get("group", 1)) == 1:
            continue
        n, c, h, w = shapes[node.input[0]]
        if a["group"] != c:
            continue
        k, stride, pads = a["kernel_shape"][0], a.get("strides", [1, 1])[0], a.get("pads", [0, 0, 0, 0])
        layers.append(DwLayer(node.name or node.output[0], c, h, w, k, stride, pads[0]))
    return layers


def blocks(cfg: HwConfig, layer: DwLayer) -> int:
    return -(-layer.channels // cfg.block_out)


def blockdiag(cfg: HwConfig, layer: DwLayer) -> int:
    """One GEMM per (channel block, output row): OW pixels x K*K taps, one uop-iteration each."""
    row = GemmInsn(iter_out=layer.ow, iter_in=layer.k * layer.k)
    return blocks(cfg, layer) * layer.oh * CycleModel(cfg).duration(row, 0)


def alu(cfg: HwConfig, layer: DwLayer) -> int:
    """Per (channel block, tap): copy the shifted input rows, multiply by the held weight row, add into the sum."""
    pix = {"iter_out": layer.oh, "iter_in": layer.ow}
    copy = AluInsn(alu_opcode=AluOp.ADD, reset=True, src_factor_in=1, dst_factor_in=1, **pix)
    mul = AluInsn(alu_opcode=AluOp.MUL, dst_factor_in=1, **pix)  # one weight row: held across the inner loop
    add = AluInsn(alu_opcode=AluOp.ADD, src_factor_in=1, dst_factor_in=1, **pix)
    per_tap = sum(alu_cycles(cfg.timing, i) for i in (copy, mul, add))
    return blocks(cfg, layer) * layer.k * layer.k * per_tap


def toeplitz(cfg: HwConfig, layer: DwLayer) -> int:
    """Per channel, kernel row and 16 output columns: one GEMM uop-iteration per 16-aligned input block."""
    span = (cfg.block_out - 1) * layer.stride + layer.k
    per_row = layer.k * math.ceil(layer.ow / cfg.block_out) * math.ceil(span / cfg.block_in)
    t = cfg.timing
    return layer.channels * layer.oh * (t.gemm_setup + per_row + t.gemm_pipeline)


def dw_pos(cfg: HwConfig, layer: DwLayer, inp_rows_per_cycle: int = 1) -> int:
    """Depthwise mode, 16 positions x 16 channels: per (channel block, column segment) the first output row
    fills K segment rows, each later one ``stride`` rows; each segment costs max(reads, taps, writes)."""
    seg = (cfg.block_out - 1) * layer.stride + layer.k  # input pixels of one segment row
    first = max(math.ceil(layer.k * seg / inp_rows_per_cycle), layer.k * layer.k, cfg.block_out)
    later = max(math.ceil(layer.stride * seg / inp_rows_per_cycle), layer.k * layer.k, cfg.block_out)
    t = cfg.timing
    column = t.gemm_setup + first + (layer.oh - 1) * later + t.gemm_pipeline
    return blocks(cfg, layer) * math.ceil(layer.ow / cfg.block_out) * column


def dw_pos2(cfg: HwConfig, layer: DwLayer) -> int:
    return dw_pos(cfg, layer, inp_rows_per_cycle=2)


def dw_tap(cfg: HwConfig, layer: DwLayer, columns: int = 0) -> int:
    """Depthwise mode reducing over taps in the adder tree (``columns`` taps per pass, default all BLOCK_IN),
    from a K-line buffer: per output pixel max(stride^2 reads, passes, 1 write)."""
    per_pixel = max(layer.stride**2, math.ceil(layer.k * layer.k / (columns or cfg.block_in)), 1)
    t = cfg.timing
    fill = (layer.k - 1) * layer.w  # the line buffer's first K-1 rows, per channel block
    return blocks(cfg, layer) * (t.gemm_setup + fill + layer.oh * layer.ow * per_pixel + t.gemm_pipeline)


def dw_tap8(cfg: HwConfig, layer: DwLayer) -> int:
    """``dw_tap`` with one product per DSP pair (BLOCK_IN / 2 taps per pass): what the part's DSPs allow."""
    return dw_tap(cfg, layer, columns=cfg.block_in // 2)


def dw_col(cfg: HwConfig, layer: DwLayer) -> int:
    """``dw_tap8`` fed by a K x K window register instead of a line buffer: moving one output pixel along a row
    reads the window's ``stride`` new columns (stride * K rows); each output row starts with a full window."""
    passes = math.ceil(layer.k * layer.k / (cfg.block_in // 2))
    later = max(layer.stride * layer.k, passes)
    row = max(layer.k * layer.k, passes) + (layer.ow - 1) * later
    t = cfg.timing
    return blocks(cfg, layer) * layer.oh * (t.gemm_setup + row + t.gemm_pipeline)


def dw_mode(cfg: HwConfig, layer: DwLayer) -> int:
    """The depthwise mode as built (EPI dw, docs/isa.md): per channel block one GEMM over the output pixels,
    timed by the cycle model itself (reads, then passes, per pixel)."""
    model = CycleModel(cfg)
    model.duration(EpiInsn(dw=True, dw_k=layer.k, dw_stride=layer.stride), 0)
    return blocks(cfg, layer) * model.duration(GemmInsn(iter_out=layer.oh, iter_in=layer.ow), 0)


CANDIDATES = {"blockdiag": blockdiag, "alu": alu, "toeplitz": toeplitz, "dw_pos": dw_pos, "dw_pos2": dw_pos2,
              "dw_tap": dw_tap, "dw_tap8": dw_tap8, "dw_col": dw_col, "dw_mode": dw_mode}  # fmt: skip


def dram_cycles(cfg: HwConfig, layer: DwLayer, name: str) -> int:
    """Cycles of the layer's DRAM traffic at the bus width: input, output and its weights once (block-diagonal:
    a 16x16 block per tap and channel block; the others: one per-channel row per tap)."""
    act = layer.channels * (layer.h * layer.w + layer.oh * layer.ow)
    taps = blocks(cfg, layer) * layer.k * layer.k
    wgt = taps * (cfg.wgt_elem_bytes if name == "blockdiag" else cfg.block_out)
    return math.ceil((act + wgt) / cfg.bus_bytes)


@dataclass(frozen=True)
class Row:
    layer: DwLayer
    fused: dict[str, int]  # compute cycles per candidate
    alone: dict[str, int]  # max(compute, DRAM) per candidate


def study(cfg: HwConfig, layers: list[DwLayer]) -> list[Row]:
    rows = []
    for layer in layers:
        fused = {n: f(cfg, layer) for n, f in CANDIDATES.items()}
        alone = {n: max(c, dram_cycles(cfg, layer, n)) for n, c in fused.items()}
        rows.append(Row(layer, fused, alone))
    return rows


def table(model: str, cfg: HwConfig, rows: list[Row]) -> Table:
    t = Table(title=f"{model}: depthwise layers on {cfg.name!r}, cycles fused (stand-alone with DRAM)")
    for c in ("layer", "C", "HxW", "k/s", "MACs", *CANDIDATES):
        t.add_column(c, justify="left" if c == "layer" else "right")
    for r in rows:
        L = r.layer
        cells = [f"{r.fused[n]:,} ({r.alone[n]:,})" for n in CANDIDATES]
        t.add_row(L.name, str(L.channels), f"{L.h}x{L.w}", f"{L.k}/{L.stride}", f"{L.macs:,}", *cells)
    macs = sum(r.layer.macs for r in rows)
    for kind in ("fused", "alone"):
        tot = {n: sum(getattr(r, kind)[n] for r in rows) for n in CANDIDATES}
        t.add_row(f"total {kind}", "", "", "", f"{macs:,}", *(f"{tot[n]:,}" for n in CANDIDATES))
        t.add_row(f"MACs/cycle {kind}", "", "", "", "", *(f"{macs / tot[n]:.1f}" for n in CANDIDATES))
    return t


def totals(rows: list[Row]) -> dict:
    macs = sum(r.layer.macs for r in rows)
    out = {"macs": macs}
    for kind in ("fused", "alone"):
        tot = {n: sum(getattr(r, kind)[n] for r in rows) for n in CANDIDATES}
        out[kind] = {n: {"cycles": c, "macs_per_cycle": round(macs / c, 2)} for n, c in tot.items()}
    return out


def compiled_cycles(cfg: HwConfig, layer: DwLayer) -> tuple[int, str]:
    """Cycles (timing-only simulator) and schedule of the compiler's program for the layer, MobileNet's epilogue."""
    c = layer.channels
    w = np.ones((c, 1, layer.k, layer.k), np.int8)
    ep = Epilogue(bias=np.zeros(c, np.int64), multiplier=np.full(c, 1 << 14), shift=20, clip=(0, 96))
    shape = (1, c, layer.h, layer.w)
    comp = compile_depthwise(shape, w, stride=layer.stride, padding=layer.pad, epilogue=ep, config=cfg)
    return comp.search.cycles, comp.schedule.describe()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", nargs="+", default=["mobilenet_v2"], choices=sorted(SUITE))
    p.add_argument("--config", default=DEFAULT_PRESET)
    p.add_argument("--json", type=Path)
    p.add_argument("--compile", action="store_true", help="also compile each layer and time its program")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    console = Console(width=None if sys.stdout.isatty() else 200)
    records = {}
    for name in args.model:
        rows = study(cfg, depthwise_layers(SUITE[name].load()))
        console.print(table(name, cfg, rows))
        records[name] = {
            "layers": [{**asdict(r.layer), "macs": r.layer.macs, "fused": r.fused, "alone": r.alone} for r in rows],
            "totals": totals(rows),
        }
        if args.compile:
            compiled = [compiled_cycles(cfg, r.layer) for r in rows]
            for rec, (cycles, schedule) in zip(records[name]["layers"], compiled, strict=True):
                rec["compiled"], rec["schedule"] = cycles, schedule
            total = sum(c for c, _ in compiled)
            macs = records[name]["totals"]["macs"]
            records[name]["totals"]["compiled"] = {"cycles": total, "macs_per_cycle": round(macs / total, 2)}
            console.print(f"{name}: compiled programs {total:,} cycles, {macs / total:.1f} MACs/cycle")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"config": cfg.name, "models": records}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
