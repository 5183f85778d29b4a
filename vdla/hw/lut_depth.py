"""A timing proxy without a timing tool: the deepest combinational path, in LUT levels, of a Yosys netlist
mapped by ``synth_xilinx`` (read from Yosys' ``write_json``).

Counting rules (one definition, used by ``vdla fit``):

* **Boundaries.** A path starts at the output of a flip-flop (``FD*``), a block RAM (``RAMB*``), an input
  buffer or a top-level input, and ends at an input of one of those, an output buffer or a top-level output.
* **Hard blocks of both families.** Block RAM (``RAMB18E1``/``RAMB36E1`` of 7-series, ``RAMB18E2``/``RAMB36E2``
  of UltraScale+) and UltraRAM (``URAM288``) read into registers: their outputs start paths and every input
  ends one, as a flip-flop's.
* **DSP48E1 and DSP48E2.** Their registers are boundaries like flip-flops, and the stages between them count
  as LUT levels of about their delay (Yosys' xc7 timing model, at about 1 ns a level; an UltraScale+ slice's
  stages take about 60% of that time at -1 and 50% at -2, as its LUT levels do, so the same counts hold): the
  multiplier (``A``, ``B``, ``D`` and their cascades to ``M``) :data:`DSP_MULT_LEVELS`, the post-adder (``M``,
  ``C``, ``PCIN``, carry and mode inputs to ``P``) :data:`DSP_ADD_LEVELS`. The two slices' pins and register
  parameters have the same names. A DSP with ``PREG`` off is combinational to ``P``/``PCOUT``
  (a path goes on through it); with ``MREG`` on, ``P`` starts a path at :data:`DSP_ADD_LEVELS`; an input
  whose stage is registered ends the path there, plus the levels before that register.
* **Levels.** Each LUT (``LUT1``..``LUT6``, ``INV``) on the path is one level, and so is the asynchronous read
  of a LUT RAM or shift register (``RAM32M``, ``RAM64X1D``, ``SRL16E``, ...: address to data out; its data and
  write-enable inputs are path ends, like a flip-flop's). ``MUXF7``/``MUXF8`` combine LUTs of one slice and
  add none (``MUXF9`` of UltraScale+ too). A carry chain counts one level where a path enters it (``S``,
  ``DI`` or ``CYINIT`` of a ``CARRY4``, ``S`` or ``DI`` of UltraScale+'s ``CARRY8``) and none along it (``CI``
  from the previous block, ``CI_TOP``): a 32-bit add is one level, as its dedicated carry logic is several
  times faster than a LUT and its routing.
* The budget a path is held to is the part's at the preset's clock (:meth:`vdla.parts.Part.level_budget`):
  :data:`TARGET_LEVELS`, 8, for 100 MHz on the xc7z020's -1 speed grade; :meth:`LogicPath.to_dict` takes
  another.

Unknown cell types are boundaries too and are listed in the result, so a new primitive is never silently
counted as a LUT.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from vdla.errors import VdlaError

TARGET_LEVELS = 8
DSP_MULT_LEVELS = 3  # an unregistered 25x18 multiply, A/B to M: about 2.6 ns on the -1 grade
DSP_ADD_LEVELS = 1  # the post-adder, C/PCIN/M to P: about 1.2 ns

_LUT = re.compile(r"LUT[1-6]|INV")
_SEQUENTIAL = re.compile(r"FD[CPRS]E?(_1)?|RAMB(18|36)E[12]|URAM288|IBUF|OBUF|BUFGC?E?")
_MEMORY_READ = re.compile(r"RAM(16|32|64|128|256|512)(M|M16|M8|X1[SD])|RAM64X8SW|RAM32X16DR8|SRLC?(16|32)E")
_READ_PIN = re.compile(r"ADDR[A-H]|A\d*|DPRA\d*")  # the address pins of a LUT RAM or shift register
_FREE = {"MUXF7", "MUXF8", "MUXF9"}
_CARRY = {"CARRY4", "CARRY8"}
_DSP = {"DSP48E1", "DSP48E2"}
_IGNORED = {"$scopeinfo"}  # Yosys' record of a flattened module's scope: no pins


class NetlistError(VdlaError, ValueError):
    """A netlist the depth walk cannot use (a combinational loop, no such module)."""


@dataclass(frozen=True)
class PathStep:
    """One cell on the path: its name, type and the net it drives (or, for the last step, reads)."""

    cell: str
    type: str
    net: str


@dataclass(frozen=True)
class LogicPath:
    """The deepest combinational path: ``levels`` by the module's rules, from ``start`` (a boundary cell's
    output net or a top input) to ``end`` (a boundary cell's input pin or a top output); ``steps`` are the
    counted and free cells between, in order. ``unknown`` lists cell types treated as boundaries;
    ``units`` the deepest path ending in each unit (the endpoint's instance path, two levels), deepest first;
    ``unit_ends`` the (unit, start, end) of each of those paths, in the same order."""

    levels: int
    start: str
    end: str
    steps: tuple[PathStep, ...]
    unknown: tuple[str, ...] = ()
    units: tuple[tuple[str, int], ...] = ()
    unit_ends: tuple[tuple[str, str, str], ...] = ()

    @property
    def meets_target(self) -> bool:
        return self.levels <= TARGET_LEVELS

    def to_dict(self, target: int = TARGET_LEVELS) -> dict:
        """The path as a record, held to ``target`` levels (the part's level budget at the clock)."""
        return {
            "levels": self.levels,
            "target": target,
            "meets_target": self.levels <= target,
            "start": self.start,
            "end": self.end,
            "path": [f"{s.type} {s.cell} -> {s.net}" for s in self.steps],
            "unknown_cell_types": list(self.unknown),
            "by_unit": dict(self.units),
            "by_unit_ends": {u: {"start": a, "end": b} for u, a, b in self.unit_ends},
        }


def _net_names(module: dict) -> dict[int, str]:
    """A readable name for each net bit: public names (no ``$``) first, the shortest of them."""
    names: dict[int, str] = {}
    rank: dict[int, tuple[int, int]] = {}
    for name, net in module.get("netnames", {}).items():
        hidden = int(net.get("hide_name", 0)) or name.startswith("$")
        bits = net["bits"]
        for i, b in enumerate(bits):
            if not isinstance(b, int):
                continue
            label = name if len(bits) == 1 else f"{name}[{i + net.get('offset', 0)}]"
            key = (hidden, len(label))
            if b not in rank or key < rank[b]:
                rank[b], names[b] = key, label
    return names


def _unit(name: str) -> str:
    """The instance path of a net or cell name, up to two levels (``u_compute.u_loop``): "(top)" for a name
    of the top module, "(unnamed)" for one Yosys made up."""
    if name.startswith("$"):
        return "(unnamed)"
    parts = []
    for part in name.split(".")[:-1]:
        part = part.lstrip("\\")
        if "$" in part or not part:
            break
        parts.append(part)
    return ".".join(parts[:2]) or "(top)"


def _kind(cell_type: str) -> str:
    if cell_type in _IGNORED:
        return "ignored"
    if _LUT.fullmatch(cell_type):
        return "lut"
    if cell_type in _CARRY:
        return "carry"
    if cell_type in _DSP:
        return "dsp"
    if cell_type in _FREE:
        return "free"
    if _MEMORY_READ.fullmatch(cell_type):
        return "memory"
    if _SEQUENTIAL.fullmatch(cell_type):
        return "boundary"
    return "unknown"


def _on(cell: dict, param: str) -> bool:
    """A DSP48E1/DSP48E2 register parameter is set (Yosys writes parameters as binary strings or integers)."""
    value = cell.get("parameters", {}).get(param, 0)
    return int(value, 2) != 0 if isinstance(value, str) else bool(value)


_DSP_MULT_PINS = {"A": "AREG", "ACIN": "AREG", "B": "BREG", "BCIN": "BREG", "D": "DREG"}
_DSP_ADD_PINS = {
    "C": "CREG",
    "CARRYIN": "CARRYINREG",
    "OPMODE": "OPMODEREG",
    "ALUMODE": "ALUMODEREG",
    "CARRYINSEL": "CARRYINSELREG",
    "INMODE": "INMODEREG",
    "PCIN": "",
    "CARRYCASCIN": "",
    "MULTSIGNIN": "",
}


def _pin(cell: dict, kind: str, pin: str) -> tuple[int, bool] | None:
    """How the rules treat input ``pin`` of a cell of ``kind``: (levels it adds, whether the path ends there),
    or None for a pin they do not follow (a boundary's ends add no levels; a DSP's, those before its
    register)."""
    if kind in ("boundary", "unknown"):
        return 0, True
    if kind == "memory":
        return (1, False) if _READ_PIN.fullmatch(pin) else (0, True)
    if kind == "dsp":
        return _dsp_pin(cell, pin)
    if kind == "free" or (kind == "carry" and pin in ("CI", "CI_TOP")):
        return 0, False
    return (1, False) if kind in ("lut", "carry") else None


def _dsp_pin(cell: dict, pin: str) -> tuple[int, bool] | None:
    """(levels from ``pin`` to the DSP's first register or its P outputs, whether they reach a register) for
    an input pin of a DSP48E1 or DSP48E2; None for a pin the rules do not follow (clocks, enables, resets)."""
    if pin in _DSP_MULT_PINS:
        reg = _DSP_MULT_PINS[pin]
        if _on(cell, reg) or (pin == "D" and _on(cell, "ADREG")):
            return 0, True
        if cell.get("parameters", {}).get("USE_MULT", "MULTIPLY") == "NONE":  # A:B straight to the adder
            return DSP_ADD_LEVELS, _on(cell, "PREG")
        if _on(cell, "MREG"):
            return DSP_MULT_LEVELS, True
        return DSP_MULT_LEVELS + DSP_ADD_LEVELS, _on(cell, "PREG")
    if pin in _DSP_ADD_PINS:
        reg = _DSP_ADD_PINS[pin]
        if reg and _on(cell, reg):
            return 0, True
        return DSP_ADD_LEVELS, _on(cell, "PREG")
    return None


def longest_path(netlist: dict, top: str) -> LogicPath:
    """The deepest register-to-register (or port) path of module ``top`` in a parsed ``write_json`` netlist
    of a flattened, mapped design."""
    try:
        module = netlist["modules"][top]
    except KeyError:
        raise NetlistError(f"the netlist has no module {top!r}") from None
    names = _net_names(module)
    driver: dict[int, tuple[str, str]] = {}  # bit -> (cell, output pin)
    cells = module.get("cells", {})
    unknown = set()
    for cname, cell in cells.items():
        kind = _kind(cell["type"])
        unknown |= {cell["type"]} if kind == "unknown" else set()
        for pin, bits in cell["connections"].items():
            if cell.get("port_directions", {}).get(pin) == "output":
                for b in bits:
                    if isinstance(b, int):
                        driver[b] = (cname, pin)

    # arrival[bit] = (levels, predecessor bit or None, cell that drives it); boundary outputs arrive at 0
    arrival: dict[int, tuple[int, int | None]] = {}
    state: dict[int, int] = {}  # 1: on the stack, 2: done

    def inputs(cname: str, out_pin: str) -> list[tuple[int, int]]:
        """(input bit, weight) pairs that reach ``out_pin`` of a combinational cell."""
        cell = cells[cname]
        kind = _kind(cell["type"])
        dirs = cell.get("port_directions", {})
        pairs = []
        for pin, bits in cell["connections"].items():
            arc = _pin(cell, kind, pin) if dirs.get(pin) == "input" else None
            if arc is not None and not arc[1]:
                pairs += [(b, arc[0]) for b in bits if isinstance(b, int)]
        return pairs

    def base(cname: str) -> int:
        """Where a combinational cell's output starts a path of its own: a DSP's P after its M register."""
        cell = cells[cname]
        return DSP_ADD_LEVELS if _kind(cell["type"]) == "dsp" and _on(cell, "MREG") else 0

    def boundary(cname: str) -> bool:
        kind = _kind(cells[cname]["type"])
        return kind in ("boundary", "unknown") or (kind == "dsp" and _on(cells[cname], "PREG"))

    def resolve(bit: int) -> None:
        stack = [bit]
        while stack:
            b = stack[-1]
            if state.get(b) == 2:
                stack.pop()
                continue
            src = driver.get(b)
            if src is None or boundary(src[0]):
                arrival[b], state[b] = (0, None), 2
                stack.pop()
                continue
            pending = [i for i, _ in inputs(*src) if state.get(i) != 2]
            if state.get(b) == 1 or not pending:
                if pending:  # revisited while its inputs are still open: a loop
                    raise NetlistError(f"combinational loop through cell {src[0]} ({names.get(b, b)})")
                best = (base(src[0]), None)
                for i, w in inputs(*src):
                    lv = arrival[i][0] + w
                    if lv > best[0] or (best[1] is None and lv == best[0]):
                        best = (lv, i)
                arrival[b], state[b] = best, 2
                stack.pop()
                continue
            state[b] = 1
            for i in pending:
                if state.get(i) == 1:
                    raise NetlistError(f"combinational loop through cell {src[0]} ({names.get(b, b)})")
                stack.append(i)

    # the path ends: inputs of boundary cells (and the sinks of memories), top outputs
    ends: list[tuple[int, str, str, int]] = []  # (bit, label, unit, levels after the bit)
    for cname, cell in cells.items():
        kind = _kind(cell["type"])
        dirs = cell.get("port_directions", {})
        for pin, bits in cell["connections"].items():
            arc = _pin(cell, kind, pin) if dirs.get(pin) == "input" else None
            if arc is not None and arc[1]:
                q = [names.get(b, str(b)) for b in cell["connections"].get("Q", []) if isinstance(b, int)]
                label = f"{cell['type']} {cname}" + (f" (-> {q[0]})" if q else "") + f".{pin}"
                for i, b in enumerate(bits):
                    if isinstance(b, int):
                        unit = _unit(q[0] if q else cname)
                        ends.append((b, f"{label}[{i}]" if len(bits) > 1 else label, unit, arc[0]))
    for pname, port in module.get("ports", {}).items():
        if port["direction"] == "output":
            bits = port["bits"]
            ends += [(b, f"output {pname}[{i}]", "(ports)", 0) for i, b in enumerate(bits) if isinstance(b, int)]

    worst_bit, worst_end, worst = None, "", -1
    by_unit: dict[str, tuple[int, int, str]] = {}  # unit -> (levels, end bit, end label)
    for b, label, unit, after in ends:
        resolve(b)
        levels = arrival[b][0] + after
        if levels > by_unit.get(unit, (-1,))[0]:
            by_unit[unit] = (levels, b, label)
        if levels > worst:
            worst_bit, worst_end, worst = b, label, levels
    if worst_bit is None:
        return LogicPath(0, "", "", (), tuple(sorted(unknown)))
    order = sorted(by_unit, key=lambda u: (-by_unit[u][0], u))

    def walk(b: int) -> tuple[str, list[PathStep]]:
        """The start of the path that arrives at ``b``, and its steps in order."""
        steps: list[PathStep] = []
        while arrival[b][1] is not None:
            cname = driver[b][0]
            steps.append(PathStep(cname, cells[cname]["type"], names.get(b, str(b))))
            b = arrival[b][1]
        src = driver.get(b)
        start = names.get(b, str(b)) if src is None else f"{cells[src[0]]['type']} {src[0]} -> {names.get(b, str(b))}"
        return start, steps[::-1]

    start, steps = walk(worst_bit)
    units = tuple((u, by_unit[u][0]) for u in order)
    unit_ends = tuple((u, walk(by_unit[u][1])[0], by_unit[u][2]) for u in order)
    return LogicPath(worst, start, worst_end, tuple(steps), tuple(sorted(unknown)), units, unit_ends)


def longest_path_file(path: str | Path, top: str) -> LogicPath:
    """:func:`longest_path` of a ``write_json`` file."""
    return longest_path(json.loads(Path(path).read_text()), top)
