"""The hardware configuration: the single source of truth for every part of vdla.

A :class:`HwConfig` is loaded from a JSON preset shipped in ``vdla/presets`` (or from any JSON file
of the same shape). The compiler, the simulator, the RTL parameter header and the driver all read it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import ClassVar

from vdla.errors import VdlaError
from vdla.parts import PartError, get_part

DEFAULT_PRESET = "pynq-z2"
PRESET_ALIASES = {"pynq": "pynq-z2"}  # old preset names: artifacts and commands that use them keep working
LUT_ENTRIES = 256  # the activation table: one int8 output per int8 input (EPI lut, LOAD LUT)
# keys a preset may leave out: their defaults (the board keys default to the PYNQ-Z1/Z2's xc7z020)
OPTIONAL_KEYS = (
    "description",
    "depthwise_mode",
    "out_multiplier",
    "alu_lanes",
    "src_out",
    "lut_tables",
    "part",
    "boards",
    "reg_base_addr",
    "axi_addr_bits",
    "uram_buffers",
)
UNIT_FLAGS = ("depthwise_mode", "out_multiplier", "src_out")  # the optional units a build may leave out
ADDRESS_KEYS = ("reg_base_addr", "dram_base_addr", "dram_bytes")  # integers a preset may write as hex strings
# keys that do not change what a bitstream computes or how it is driven (uram_buffers: where a buffer is built)
NOT_HASHED = ("description", "boards", "uram_buffers")
URAM_BUFFER_NAMES = ("inp", "wgt", "acc", "out", "uop")  # the buffers a preset may build in UltraRAM (out: both copies)
URAM_BITS = (4096, 64)  # a URAM288 as Yosys maps a buffer: 4K words of 64 data bits (its 72, byte enables of 8)
DW_MAX_K = 5  # the depthwise mode's window: DW_MAX_K rows (kernel rows) of DW_MAX_K INP elements (EPI dw)


class ConfigError(VdlaError, ValueError):
    """A hardware configuration that is malformed or cannot be built."""


@dataclass(frozen=True)
class Timing:
    """Named parameters of the cycle model, shared by the simulator and the RTL (all in cycles).

    The RTL implements exactly this timing; ``benchmarks/cycle_agreement.py`` checks the agreement.
    """

    dram_read_latency: int = 32  # AR accepted -> first R beat
    dram_write_latency: int = 16  # last W beat -> B response
    insn_fetch_latency: int = 3  # start -> first instruction can start, on top of dram_read_latency
    insn_fetch_cycles: int = 2  # per 128-bit instruction on the read channel
    cmd_queue_depth: int = 32  # per-stage command queue
    token_queue_depth: int = 128  # per dependency-token queue
    dma_setup: int = 1  # per LOAD/STORE instruction that moves data: start -> first DRAM request
    dma_row_overhead: int = 1  # per AXI burst: idle cycles of the DRAM channel after it
    dma_pad_cycles: int = 1  # per padding element written
    gemm_setup: int = 2  # per GEMM instruction
    gemm_pipeline: int = 4  # GEMM pipeline drain at the end of an instruction
    out_mul_lag: int = 2  # the OUT-path multiplier's stages: a GEMM under EPI mul drains this much longer
    alu_setup: int = 2
    alu_pipeline: int = 2
    alu_ii: int = 2  # per uop-iteration of an ALU instruction reading ACC[src] (vdla.cycles.alu_ii, src_reads)
    alu_mul_cycles: int = 2  # per uop-iteration of a MUL: its multiply is registered (vdla.cycles.alu_ii)
    nop_cycles: int = 1  # a LOAD/STORE with x_size 0, or FINISH
    max_burst_beats: int = 256  # AXI4 burst limit; bursts also split at 4 KiB boundaries


@dataclass(frozen=True)
class HwConfig:
    """One VDLA hardware configuration plus the values derived from it."""

    name: str
    batch: int
    block_in: int
    block_out: int
    inp_width: int
    wgt_width: int
    acc_width: int
    out_width: int
    inp_buff_bytes: int
    wgt_buff_bytes: int
    acc_buff_bytes: int
    uop_buff_bytes: int
    bus_width_bits: int
    clock_mhz: float
    dram_bytes: int
    dram_base_addr: int
    description: str = ""
    # the board: its part (vdla.parts.PARTS), the boards that carry it, the accelerator's register base on the
    # PS's general-purpose master port, and the address bits of its AXI master ports (the PS's HP ports')
    part: str = "xc7z020"
    boards: tuple[str, ...] = ()
    reg_base_addr: int = 0x43C0_0000
    axi_addr_bits: int = 32
    # the buffers built in UltraRAM (URAM288) instead of block RAM, on parts that have it (kv260: the WGT buffer)
    uram_buffers: tuple[str, ...] = ()
    depthwise_mode: bool = True  # the GEMM core's depthwise mode (EPI dw), where batch and blocks allow it
    out_multiplier: bool = True  # the per-channel multiplier in the OUT mirror's path (EPI mul)
    alu_lanes: int = 0  # the ALU's lanes: 0 one per ACC lane; half that, two passes a row (but ADD): alu_passes
    src_out: bool = True  # the GEMMs' input rows from OUT (EPI src_out): a copy of the OUT mirror, block RAM
    lut_tables: int = 2  # activation tables held at once, 1 or 2 (EPI lut_table selects one): per-lane LUT RAM
    timing: Timing = field(default_factory=Timing)

    def __post_init__(self) -> None:
        self._check_types()
        for f in (
            "batch",
            "block_in",
            "block_out",
            "inp_buff_bytes",
            "wgt_buff_bytes",
            "acc_buff_bytes",
            "uop_buff_bytes",
            "bus_width_bits",
            "dram_bytes",
        ):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0 or v & (v - 1):
                raise ConfigError(f"config {self.name!r}: {f} must be a positive power of two, got {v!r}")
        if (self.inp_width, self.wgt_width, self.acc_width, self.out_width) != (8, 8, 32, 8):
            raise ConfigError(
                f"config {self.name!r}: only int8 inputs/weights/outputs with int32 accumulators are supported"
            )
        lanes = self.batch * self.block_out  # (types: _check_types)
        if self.lut_tables not in (1, 2):
            raise ConfigError(f"config {self.name!r}: lut_tables must be 1 or 2, got {self.lut_tables!r}")
        if self.alu_lanes not in (0, lanes) and (lanes % 2 or self.alu_lanes != lanes // 2):
            raise ConfigError(
                f"config {self.name!r}: alu_lanes must be 0 or {lanes} (one per accumulator lane) or "
                f"{lanes // 2} (half: two passes a row), got {self.alu_lanes!r}"
            )
        if self.alu_passes > 1 and self.out_multiplier:
            raise ConfigError(
                f"config {self.name!r}: alu_lanes {self.alu_lanes} (a half-width ALU) cannot multiply a row a cycle, "
                "which the OUT-path multiplier needs: set out_multiplier false"
            )
        if self.bus_width_bits < 32:
            raise ConfigError(f"config {self.name!r}: bus_width_bits must be >= 32")
        for buf in ("inp", "wgt", "acc"):
            if getattr(self, f"{buf}_depth") < 1:
                raise ConfigError(f"config {self.name!r}: {buf} buffer smaller than one element")
        if self.uop_dst_bits + self.uop_src_bits + self.uop_wgt_bits > 32:
            raise ConfigError(
                f"config {self.name!r}: buffer depths need "
                f"{self.uop_dst_bits}+{self.uop_src_bits}+{self.uop_wgt_bits} micro-op bits > 32"
            )
        if self.out_elem_bytes > LUT_ENTRIES:
            raise ConfigError(
                f"config {self.name!r}: an OUT element of {self.out_elem_bytes} bytes exceeds the activation "
                f"table's {LUT_ENTRIES} entries (batch x block_out at most {LUT_ENTRIES})"
            )
        self._check_board()

    def _check_types(self) -> None:
        """Every field has its declared type (a bool is not an int; an int clock is a float), naming the field."""
        for f in fields(self):
            v, t = getattr(self, f.name), f.type
            ok = {
                "str": isinstance(v, str),
                "int": type(v) is int,
                "bool": type(v) is bool,
                "float": type(v) in (int, float) and math.isfinite(v),
                "tuple[str, ...]": isinstance(v, tuple) and all(isinstance(b, str) for b in v),
                "Timing": isinstance(v, Timing),
            }[t]
            if not ok:
                raise ConfigError(f"config {self.name!r}: {f.name} must be {_TYPE_WORDS[t]}, got {v!r}")
        for f in fields(Timing):
            v = getattr(self.timing, f.name)
            if type(v) is not int or v < 0:
                raise ConfigError(f"config {self.name!r}: timing.{f.name} must be a non-negative integer, got {v!r}")

    def _check_board(self) -> None:
        """The board fields: a known part, a clock, address ranges and a bus the part's ports have."""
        where = f"config {self.name!r}"
        try:
            part = get_part(self.part)
        except PartError as e:
            raise ConfigError(f"{where}: part: {e}") from None
        if not 1 <= self.clock_mhz <= 1000:
            raise ConfigError(f"{where}: clock_mhz must be between 1 and 1000 MHz, got {self.clock_mhz}")
        if not 32 <= self.axi_addr_bits <= part.addr_bits:
            raise ConfigError(
                f"{where}: axi_addr_bits must be between 32 and the {self.part}'s {part.addr_bits}, "
                f"got {self.axi_addr_bits}"
            )
        top = 1 << self.axi_addr_bits
        if self.dram_base_addr % 4096 or self.dram_base_addr + self.dram_bytes > top:
            raise ConfigError(
                f"{where}: the DRAM window {self.dram_base_addr:#x} + {self.dram_bytes:#x} must be 4 KiB aligned "
                f"and below 2**{self.axi_addr_bits} (axi_addr_bits)"
            )
        if self.reg_base_addr % 4096 or not 0 <= self.reg_base_addr < 1 << part.addr_bits:
            raise ConfigError(
                f"{where}: reg_base_addr {self.reg_base_addr:#x} must be 4 KiB aligned and below "
                f"2**{part.addr_bits} (the {self.part}'s address space)"
            )
        if self.bus_width_bits > part.hp_width_bits:
            raise ConfigError(
                f"{where}: bus_width_bits {self.bus_width_bits} is wider than the {self.part}'s "
                f"{part.hp_width_bits}-bit HP ports"
            )
        unknown = [b for b in self.uram_buffers if b not in URAM_BUFFER_NAMES]
        if unknown or len(set(self.uram_buffers)) != len(self.uram_buffers):
            raise ConfigError(
                f"{where}: uram_buffers must name each buffer at most once, of {', '.join(URAM_BUFFER_NAMES)}; "
                f"got {list(self.uram_buffers)}"
            )
        if self.uram_buffers and not part.capacity["URAM"]:
            raise ConfigError(
                f"{where}: uram_buffers {list(self.uram_buffers)}: the {self.part} has no UltraRAM (URAM288)"
            )
        over = self.capacity_overruns()
        if over:
            raise ConfigError(f"{where}: does not fit the {self.part}: {'; '.join(over)}")

    # ---- element sizes (bytes) of each memory type ------------------------------------------
    @property
    def inp_elem_bytes(self) -> int:
        return self.batch * self.block_in * self.inp_width // 8

    @property
    def wgt_elem_bytes(self) -> int:
        return self.block_out * self.block_in * self.wgt_width // 8

    @property
    def acc_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.acc_width // 8

    @property
    def out_elem_bytes(self) -> int:
        return self.batch * self.block_out * self.out_width // 8

    uop_elem_bytes: ClassVar[int] = 4
    insn_bytes: ClassVar[int] = 16

    # ---- buffer depths (elements) and index widths ------------------------------------------
    @property
    def inp_depth(self) -> int:
        return self.inp_buff_bytes // self.inp_elem_bytes

    @property
    def lut_depth(self) -> int:
        """Elements (OUT-sized rows of table entries) of one activation table: LUT_ENTRIES bytes."""
        return LUT_ENTRIES // self.out_elem_bytes

    @property
    def lut_buffer_depth(self) -> int:
        """Elements of the LUT buffer: ``lut_tables`` tables, table ``k`` from element ``k * lut_depth``."""
        return self.lut_tables * self.lut_depth

    @property
    def alu_passes(self) -> int:
        """Passes an ALU operation other than ADD takes per row: 1 with an ALU lane per accumulator lane, 2 with
        half as many (``alu_lanes``; its result comes a cycle later, as a MUL's, vdla.cycles.alu_two_cycle). ADD
        (the GEMMs' accumulation too) keeps a lane per accumulator lane and one pass."""
        return 2 if self.alu_lanes and self.alu_lanes < self.batch * self.block_out else 1

    @property
    def dw_supported(self) -> bool:
        """Whether the GEMM core has the depthwise mode (EPI dw): see :meth:`dw_refusal`."""
        return self.dw_refusal() is None

    def src_out_refusal(self) -> str | None:
        """Why GEMMs cannot read OUT rows as their input rows on this config (EPI ``src_out``: a fused layer's
        int8 results as the next GEMM's input), or None: ``src_out`` off (a build without the OUT mirror's copy
        the GEMMs read, 8 BRAM36 on ``pynq``), or an OUT row that is not an INP row (block_out != block_in)."""
        if not self.src_out:
            return f"GEMMs read OUT rows as input rows: config {self.name!r} has no copy of OUT (src_out is false)"
        if self.block_in != self.block_out:
            return f"GEMMs read OUT rows as input rows: config {self.name!r} has block_in != block_out"
        return None

    def dw_refusal(self) -> str | None:
        """Why this config has no depthwise mode, or None: ``depthwise_mode`` off (a build without its logic,
        about 6,400 LUT, left out of ``pynq``), or a shape it cannot have (one input channel per output lane needs
        batch 1 and block_in == block_out)."""
        if not self.depthwise_mode:
            return f"config {self.name!r} has no depthwise mode (depthwise_mode is false)"
        if self.batch != 1 or self.block_in != self.block_out:
            return (
                f"config {self.name!r} has no depthwise mode (batch {self.batch}, block_in {self.block_in}, "
                f"block_out {self.block_out}: it needs batch 1 and block_in == block_out)"
            )
        return None

    def dw_groups(self, k: int) -> int:
        """Groups of block_in window positions a depthwise-mode iteration with a ``k`` x ``k`` kernel covers (its
        positions ky * DW_MAX_K + q, ky < k, q < DW_MAX_K); each group is two passes, half the lanes each, and
        every pass reads a WGT element of its own (2 * dw_groups(k) elements an iteration)."""
        return -(-DW_MAX_K * k // self.block_in)

    @property
    def wgt_depth(self) -> int:
        return self.wgt_buff_bytes // self.wgt_elem_bytes

    @property
    def acc_depth(self) -> int:
        return self.acc_buff_bytes // self.acc_elem_bytes

    @property
    def uop_depth(self) -> int:
        return self.uop_buff_bytes // self.uop_elem_bytes

    @property
    def uop_dst_bits(self) -> int:
        return _log2(self.acc_depth)

    @property
    def uop_src_bits(self) -> int:
        return max(_log2(self.inp_depth), _log2(self.acc_depth))  # ALU uops index ACC with src

    @property
    def uop_wgt_bits(self) -> int:
        return _log2(self.wgt_depth)

    # ---- performance peaks ------------------------------------------------------------------
    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @property
    def peak_gops(self) -> float:
        """Peak throughput in GOPS (1 MAC = 2 ops) at the configured clock."""
        return 2 * self.macs_per_cycle * self.clock_mhz / 1e3

    @property
    def bus_bytes(self) -> int:
        """DRAM bus bytes per cycle (one AXI beat)."""
        return self.bus_width_bits // 8

    @property
    def peak_bandwidth_gbs(self) -> float:
        return self.bus_bytes * self.clock_mhz / 1e3

    @property
    def ridge_intensity(self) -> float:
        """Arithmetic intensity (ops/byte) at which the roofline's two roofs meet."""
        return self.peak_gops / self.peak_bandwidth_gbs

    @cached_property
    def hash(self) -> int:
        """32-bit hash of every parameter but :data:`NOT_HASHED`: identifies a bitstream built for this
        configuration (and the programs compiled for it)."""
        d = self.to_dict()
        return dict_hash({k: v for k, v in d.items() if k not in NOT_HASHED})

    @property
    def part_spec(self):
        """The :class:`vdla.parts.Part` this config builds for."""
        return get_part(self.part)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        d["boards"] = list(self.boards)
        d["uram_buffers"] = list(self.uram_buffers)
        d["timing"] = asdict(self.timing)
        return d

    # ---- hard blocks the build needs (an estimate; `vdla fit` measures) ----------------------
    def buffers(self) -> dict[str, tuple[int, int]]:
        """The on-chip memories the RTL builds: name -> (width bits, depth). OUT has a second copy (the GEMM's
        source-from-OUT read port) where block_in == block_out; the UOP buffer is one bank per micro-op of a
        bus beat."""
        banks = max(1, self.bus_bytes // self.uop_elem_bytes)
        out = {
            "inp": (self.inp_elem_bytes * 8, self.inp_depth),
            "wgt": (self.wgt_elem_bytes * 8, self.wgt_depth),
            "acc": (self.acc_elem_bytes * 8, self.acc_depth),
            "out": (self.out_elem_bytes * 8, self.acc_depth),
            "uop": (banks * 32, self.uop_depth // banks),
        }
        if self.src_out_refusal() is None:
            out["out_src"] = out["out"]
        return out

    def in_uram(self, buffer: str) -> bool:
        """Whether ``buffer`` (a key of :meth:`buffers`) is built in UltraRAM: ``uram_buffers`` names it (``out``
        names both copies of OUT)."""
        return buffer.removesuffix("_src") in self.uram_buffers

    def hard_block_estimate(self) -> dict[str, int]:
        """DSP, BRAM36 and URAM the build needs, estimated from its parameters as Yosys maps the RTL: two int8
        products per DSP in the GEMM core, four DSPs per ALU lane's 32-bit multiply (half the lanes on a half-width
        ALU, ``alu_lanes``), a dozen elsewhere; each buffer in BRAM36 (32 Kbit of data, 1 to 64 bits wide) or, for a
        memory shallower than 64 words, LUT RAM; a buffer of ``uram_buffers`` in URAM288 (:data:`URAM_BITS`: 4K words
        of 64 bits, one block per 64 bits of width and 4K words of depth). ``tests/test_fit_records.py`` holds it to
        each committed fit."""
        bufs = self.buffers()
        bram = sum(_bram36(w, d) for b, (w, d) in bufs.items() if not self.in_uram(b))
        uram = sum(_uram288(w, d) for b, (w, d) in bufs.items() if self.in_uram(b))
        dsp = self.macs_per_cycle // 2 + 4 * self.batch * self.block_out // self.alu_passes + 13
        return {"DSP": dsp, "BRAM36": bram, "URAM": uram}

    def capacity_overruns(self) -> list[str]:
        """What this config needs beyond its part's capacity (:meth:`hard_block_estimate`), one phrase each."""
        cap = get_part(self.part).capacity
        return [f"{r} needs about {n:,} of {cap[r]:,}" for r, n in self.hard_block_estimate().items() if n > cap[r]]

    def derived(self) -> dict:
        """Derived values, for `vdla info` and the docs."""
        return {
            "inp_elem_bytes": self.inp_elem_bytes,
            "wgt_elem_bytes": self.wgt_elem_bytes,
            "acc_elem_bytes": self.acc_elem_bytes,
            "out_elem_bytes": self.out_elem_bytes,
            "inp_depth": self.inp_depth,
            "wgt_depth": self.wgt_depth,
            "acc_depth": self.acc_depth,
            "uop_depth": self.uop_depth,
            "lut_depth": self.lut_depth,
            "lut_tables": self.lut_tables,
            "depthwise_mode": self.dw_supported,
            "out_multiplier": self.out_multiplier,
            "src_out": self.src_out_refusal() is None,
            "alu_lanes (passes a row)": f"{self.alu_lanes or self.batch * self.block_out} ({self.alu_passes})",
            "uop_bits (dst/src/wgt)": f"{self.uop_dst_bits}/{self.uop_src_bits}/{self.uop_wgt_bits}",
            "macs_per_cycle": self.macs_per_cycle,
            "peak_gops": round(self.peak_gops, 3),
            "bus_bytes_per_cycle": self.bus_bytes,
            "peak_bandwidth_gbs": round(self.peak_bandwidth_gbs, 3),
            "ridge_ops_per_byte": round(self.ridge_intensity, 3),
            "config_hash": f"0x{self.hash:08x}",
        }

    def with_timing(self, **changes) -> HwConfig:
        """A copy with some cycle-model parameters changed."""
        return replace(self, timing=replace(self.timing, **changes))


_TYPE_WORDS = {
    "str": "a string",
    "int": "an integer",
    "bool": "true or false",
    "float": "a number",
    "tuple[str, ...]": "a list of strings",
    "Timing": "an object of timing parameters",
}


def _log2(n: int) -> int:
    return max(1, math.ceil(math.log2(n)))


def _bram36(width: int, depth: int) -> int:
    """BRAM36 for a ``width`` x ``depth`` memory: the fewest of the block's aspect ratios (32K x 1 ... 512 x 64
    data bits), 0 for a memory shallower than 64 words (LUT RAM)."""
    if depth < 64:
        return 0
    return min(-(-width // w) * -(-depth // (32768 // w)) for w in (1, 2, 4, 8, 16, 32, 64))


def _uram288(width: int, depth: int) -> int:
    """URAM288 for a ``width`` x ``depth`` memory, as Yosys maps it (:data:`URAM_BITS`)."""
    words, bits = URAM_BITS
    return -(-width // bits) * -(-depth // words)


def dict_hash(d: dict) -> int:
    """32-bit hash of a JSON-able dict (sorted keys): a config's :attr:`HwConfig.hash`."""
    blob = json.dumps(d, sort_keys=True).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "little")


def config_mismatch(compiled: HwConfig, device: HwConfig) -> str:
    """Why code compiled for ``compiled`` cannot run on ``device``: both names and hashes, and the hashed fields
    that differ (a few of them)."""
    a, b = compiled.to_dict(), device.to_dict()
    diff = [f"{k} {a[k]!r} vs {b[k]!r}" for k in a if k not in NOT_HASHED + ("name",) and a[k] != b.get(k)]
    more = f" (differing: {'; '.join(diff[:4])}{'; ...' if len(diff) > 4 else ''})" if diff else ""
    return (
        f"compiled for config {compiled.name!r} (hash {compiled.hash:#010x}), the device runs {device.name!r} "
        f"(hash {device.hash:#010x}){more}: compile for {device.name!r} or run on a {compiled.name!r} device"
    )


def preset_names() -> list[str]:
    """The presets shipped in ``vdla/presets`` (aliases not included: :data:`PRESET_ALIASES`)."""
    return sorted(p.name[:-5] for p in resources.files("vdla.presets").iterdir() if p.name.endswith(".json"))


def board_presets() -> list[HwConfig]:
    """The presets that name boards (``vdla boards``), largest part last."""
    cfgs = [load_config(n) for n in preset_names()]
    return sorted((c for c in cfgs if c.boards), key=lambda c: (c.part_spec.capacity["LUT"], c.name))


def from_dict(d: dict) -> HwConfig:
    """Build a config from a dict (a parsed preset), naming any unknown or missing key."""
    d = dict(d)
    timing = d.pop("timing", {}) or {}
    known = {f.name for f in fields(HwConfig) if f.init} - {"timing"}
    unknown = set(d) - known
    if unknown:
        raise ConfigError(f"unknown config keys: {sorted(unknown)}")
    missing = {m for m in known - set(d) if m not in OPTIONAL_KEYS}
    if missing:
        raise ConfigError(f"missing config keys: {sorted(missing)}")
    tknown = {f.name for f in fields(Timing)}
    if not isinstance(timing, dict):
        raise ConfigError(f"config {d.get('name')!r}: timing must be an object of timing parameters, got {timing!r}")
    if set(timing) - tknown:
        raise ConfigError(f"unknown timing keys: {sorted(set(timing) - tknown)}")
    d["name"] = PRESET_ALIASES.get(d["name"], d["name"])
    for k in ADDRESS_KEYS:  # addresses may be written in hex: "0x43c00000"
        if isinstance(d.get(k), str):
            try:
                d[k] = int(d[k], 0)
            except ValueError:
                raise ConfigError(f"config {d['name']!r}: {k} must be an integer, got {d[k]!r}") from None
    for k in ("boards", "uram_buffers"):  # lists of strings in JSON
        if isinstance(d.get(k), list):
            d[k] = tuple(d[k])
    if "axi_addr_bits" not in d and isinstance(d.get("part"), str):
        try:
            d["axi_addr_bits"] = get_part(d["part"]).addr_bits
        except PartError:
            pass  # HwConfig names the unknown part
    return HwConfig(**d, timing=Timing(**timing))


def load_config(name_or_path: str | Path | HwConfig | None = None) -> HwConfig:
    """Load a preset by name (``pynq``, ``osdi18``, ...) or a JSON file by path."""
    if isinstance(name_or_path, HwConfig):
        return name_or_path
    name = str(name_or_path or DEFAULT_PRESET)
    name = PRESET_ALIASES.get(name, name)
    if name in preset_names():
        text = resources.files("vdla.presets").joinpath(f"{name}.json").read_text()
    elif Path(name).is_file():
        text = Path(name).read_text()
    else:
        aliases = ", ".join(f"{a} (= {n})" for a, n in PRESET_ALIASES.items())
        raise ConfigError(f"no preset or file named {name!r}; presets: {', '.join(preset_names())}; aliases: {aliases}")
    try:
        return from_dict(json.loads(text))
    except json.JSONDecodeError as e:
        raise ConfigError(f"config {name!r} is not valid JSON: {e}") from e
