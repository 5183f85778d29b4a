"""What each unit of the design costs, from the one flattened netlist of a fit (Yosys' ``write_json`` of the
mapped design): LUT, FF, DSP, BRAM36 and URAM per module instance.

A **unit** is a module instance, named by its instance path (``u_compute.u_acc_rmw.u_alu``; ``(top)`` for
``vdla_top``'s own logic, generate blocks included in the path as Yosys names them: ``g_cmdq[1].u_queue``). A
unit's cost is its own cells', not those of the instances under it: ``u_compute.u_acc_rmw`` is the
read-modify-write without its ALU. The units' costs add up to the design's.

How a cell finds its unit (:data:`UNIT_METHOD`, the record's ``unit_method``):

* **Registers and hard blocks** (flip-flops, DSP slices, block RAM, UltraRAM, LUT RAM and shift registers) keep
  the source location of the RTL that made them (their ``src`` attribute): the file names the module (one module
  a file, named as the file), and a module with one instance is that instance. Where a module has several
  instances (the buffers' ``vdla_sram``, the queues), or the source is the package's (a shared function), the
  unit is the deepest of those instances whose path prefixes a public name of the cell's nets, its outputs
  first (a register's name, a memory's). A cell name that keeps its hierarchy (``$flatten\\u_load.``, a memory's
  ``u_inp.g_block.mem``) is taken first.
* **LUTs** carry no source: ABC maps the logic between registers anew. A LUT is counted in the units of the
  registers, hard blocks, LUT RAMs and top-level outputs it feeds, through other LUTs, carry chains and wide
  muxes; a LUT that feeds several units is split equally among them (so shared decode logic is shared). The
  logic that forms a unit's register inputs is the unit's, even where the RTL computes part of it in a parent
  (a port's expression): the method attributes logic to where its results are kept.
"""

from __future__ import annotations

import re
from collections import defaultdict

UNIT_METHOD = (
    "registers, DSP, BRAM, URAM and LUT RAM by their RTL source and net names; LUTs by the units of the registers, "
    "hard blocks and outputs they feed, split equally among several (vdla.hw.units)"
)
TOP_UNIT = "(top)"
RESOURCES = ("LUT", "FF", "DSP", "BRAM36", "URAM")

_LUT = re.compile(r"LUT[1-6](_2)?|INV")
_COMB = re.compile(r"LUT[1-6](_2)?|INV|CARRY[48]|MUXF[789]")  # what a LUT's result passes through to a sink
_FF = re.compile(r"FD[CPRS]E?(_1)?")
_SRC_FILE = re.compile(r"([A-Za-z_][\w]*)\.s?v:")


def _resource(cell_type: str, lutram_luts: dict[str, int]) -> tuple[str, float] | None:
    """The resource a cell of ``cell_type`` uses and how much of it, or None for one that is not counted."""
    if _LUT.fullmatch(cell_type):
        return "LUT", 1
    if cell_type in lutram_luts:
        return "LUT", lutram_luts[cell_type]
    if _FF.fullmatch(cell_type):
        return "FF", 1
    if re.fullmatch(r"DSP48E[12]", cell_type):
        return "DSP", 1
    if re.fullmatch(r"RAMB36E[12]", cell_type):
        return "BRAM36", 1
    if re.fullmatch(r"RAMB18E[12]", cell_type):
        return "BRAM36", 0.5
    if cell_type == "URAM288":
        return "URAM", 1
    return None


def _instances(cells: dict) -> dict[str, list[str]]:
    """module name -> the instance paths of its instances, from flatten's ``$scopeinfo`` cells (named by the
    instance path, the module in their ``module_hdlname`` attribute)."""
    out: dict[str, list[str]] = defaultdict(list)
    for cname, cell in cells.items():
        if cell["type"] != "$scopeinfo" or cell.get("parameters", {}).get("TYPE", "module") != "module":
            continue
        attrs = cell.get("attributes", {})
        module = attrs.get("module_hdlname") or attrs.get("module", "").split("\\")[-1]
        out[module].append(cname.lstrip("\\"))
    return out


def _src_module(src: str, known: set[str]) -> str | None:
    """The module of the first RTL file in a ``src`` attribute ("vdla_alu.sv:158.3-170.6|/share/...") that is a
    known module's, or None (Yosys' own techmap files, the package)."""
    for part in src.split("|"):
        m = _SRC_FILE.match(part.rsplit("/", 1)[-1])
        if m and m.group(1) in known:
            return m.group(1)
    return None


def _prefix_unit(name: str, paths: list[str]) -> str | None:
    """The deepest instance path of ``paths`` that prefixes the hierarchical ``name`` (its scope), or None."""
    best = None
    for p in paths:
        if (name.startswith(p + ".") or name == p) and (best is None or len(p) > len(best)):
            best = p
    return best


def _scope(cell_name: str) -> str | None:
    """The hierarchy a cell name keeps: ``$flatten\\u_a.u_b.$x`` -> ``u_a.u_b.$x``; a public ``u_a.mem.0.0`` as is."""
    name = cell_name.lstrip("\\")
    if name.startswith("$flatten"):
        return name[len("$flatten") :].lstrip("\\")
    return None if name.startswith("$") else name


def unit_costs(netlist: dict, top: str, lutram_luts: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per unit (instance path, :data:`TOP_UNIT` for the top's own cells) its LUT, FF, DSP, BRAM36 and URAM,
    by the module docstring's rules, most LUTs first. LUT shares are fractions (a LUT split among units)."""
    module = netlist["modules"][top]
    cells = module.get("cells", {})
    instances = _instances(cells)
    all_paths = sorted({p for ps in instances.values() for p in ps})
    known = set(instances) | {top}

    # every public name of each net bit
    names: dict[int, list[str]] = defaultdict(list)
    for name, net in module.get("netnames", {}).items():
        if int(net.get("hide_name", 0)) or name.startswith("$"):
            continue
        for b in net["bits"]:
            if isinstance(b, int):
                names[b].append(name)

    def named_unit(cell: dict, candidates: list[str]) -> str | None:
        """The deepest candidate prefixing a public name of the cell's nets, outputs first."""
        dirs = cell.get("port_directions", {})
        for want in ("output", "input"):
            best = None
            for pin, bits in cell["connections"].items():
                if dirs.get(pin) != want:
                    continue
                for b in bits:
                    for n in names.get(b, ()) if isinstance(b, int) else ():
                        u = _prefix_unit(n, candidates)
                        if u is not None and (best is None or len(u) > len(best)):
                            best = u
            if best is not None:
                return best
        return None

    def cell_unit(cname: str, cell: dict) -> str:
        scope = _scope(cname)
        if scope is not None:
            u = _prefix_unit(scope, all_paths)
            if u is not None:
                return u
        mod = _src_module(cell.get("attributes", {}).get("src", ""), known)
        if mod == top:
            return TOP_UNIT
        candidates = instances.get(mod, []) if mod else []
        if len(candidates) == 1:
            return candidates[0]
        return named_unit(cell, candidates or all_paths) or TOP_UNIT

    costs: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(RESOURCES, 0.0))
    consumers: dict[int, list[str]] = defaultdict(list)  # bit -> cells reading it
    unit_of: dict[str, str] = {}  # the attributed cells (not LUTs)
    luts: list[str] = []
    for cname, cell in cells.items():
        kind = cell["type"]
        dirs = cell.get("port_directions", {})
        for pin, bits in cell["connections"].items():
            if dirs.get(pin) == "input":
                for b in bits:
                    if isinstance(b, int):
                        consumers[b].append(cname)
        res = _resource(kind, lutram_luts)
        if _COMB.fullmatch(kind) and not (res and kind in lutram_luts):
            if res:
                luts.append(cname)
            continue
        if res is not None or kind.startswith(("FD", "RAM", "DSP", "URAM", "SRL")):
            unit = cell_unit(cname, cell)
            unit_of[cname] = unit
            if res is not None:
                costs[unit][res[0]] += res[1]
        else:
            unit_of[cname] = TOP_UNIT  # I/O and clock buffers: the top's ports

    # the units each combinational cell's results reach (interned sets), in reverse topological order
    ports = {b for p in module.get("ports", {}).values() if p["direction"] == "output" for b in p["bits"]}
    reach: dict[str, frozenset[str]] = {}
    interned: dict[frozenset[str], frozenset[str]] = {}

    def outputs(cname: str) -> list[int]:
        cell = cells[cname]
        dirs = cell.get("port_directions", {})
        return [
            b for p, bits in cell["connections"].items() if dirs.get(p) == "output" for b in bits if isinstance(b, int)
        ]

    for root in luts:
        if root in reach:
            continue
        stack = [(root, False)]
        while stack:
            cname, expanded = stack.pop()
            if cname in reach:
                continue
            nexts = [c for b in outputs(cname) for c in consumers.get(b, ()) if c not in unit_of]
            if not expanded:
                stack.append((cname, True))
                stack += [(c, False) for c in nexts if c not in reach]
                continue
            s: set[str] = set()
            for b in outputs(cname):
                if b in ports:
                    s.add(TOP_UNIT)
                for c in consumers.get(b, ()):
                    if c in unit_of:
                        s.add(unit_of[c])
                    else:
                        s |= reach.get(c, frozenset())  # a loop back (none in a mapped design) adds nothing
            key = frozenset(s)
            reach[cname] = interned.setdefault(key, key)
    for cname in luts:
        units = reach[cname] or frozenset({TOP_UNIT})
        share = _resource(cells[cname]["type"], lutram_luts)[1] / len(units)
        for u in units:
            costs[u]["LUT"] += share
    order = sorted(costs, key=lambda u: (-costs[u]["LUT"], u))
    return {u: {r: round(costs[u][r], 1) for r in RESOURCES} for u in order}
