"""ONNX backend node tests through vdla's float CPU path: import, simplify, CPU JIT, compare.

    python benchmarks/onnx_conformance.py [--md docs/onnx_conformance.md] [--json out.json] [-k SUBSTRING]

The cases are the node tests of the installed ``onnx`` package: the files under
``<onnx>/backend/test/data/node`` when the wheel ships them, else the same cases generated in memory
by ``onnx.backend.test.case.node.collect_testcases`` (model, inputs and expected outputs). A case is
*considered* when every operator of its model is one vdla's importer maps
(:data:`vdla.frontend.onnx_ops.SUPPORTED`). A considered case either passes (float outputs within
rtol 1e-4 and atol 1e-4 x the largest expected magnitude, integer outputs exact) or is *unsupported*:
the importer, the simplification passes or the CPU JIT refused it before anything ran, with
``UnsupportedError`` or ``FrontendError``. Two conventions of vdla apply: int64 inputs (shapes, axes,
pads) and Resize's roi/scales/sizes inputs are bound as constants with the test's values, since vdla
compiles for fixed shapes; uint8
inputs and outputs are passed as int32 holding the same values. Anything else (a wrong answer, a crash, a refusal while
running) *fails*. tests/test_onnx_conformance.py runs the same check.

Prints a per-operator table and writes the Markdown report (per operator: passed / unsupported, and
every unsupported case with its error message).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from vdla.cpu_fallback import compile_graph
from vdla.errors import VdlaError
from vdla.frontend import FrontendError
from vdla.frontend.onnx import import_onnx
from vdla.frontend.onnx_ops import SUPPORTED
from vdla.graph.passes import simplify
from vdla.graph.types import UnsupportedError

ROOT = Path(__file__).resolve().parent.parent
RTOL = 1e-4
ATOL = 1e-4  # times the largest expected magnitude (at least 1)

# cases left out by name, with the reason (kept short: every entry costs coverage)
SKIP: dict[str, str] = {}


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]

    @property
    def ops(self) -> list[str]:
        return sorted(
            {n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in self.model.graph.node}
        )


@dataclass
class Result:
    name: str
    ops: list[str]
    status: str  # "pass", "unsupported", "fail"
    message: str = ""
    seconds: float = 0.0
    max_error: float | None = None
    stage: str = ""
    extra: dict = field(default_factory=dict)


def _read_pb(path: Path) -> np.ndarray | None:
    t = onnx.TensorProto()
    try:
        t.ParseFromString(path.read_bytes())
        return numpy_helper.to_array(t)
    except Exception:  # sequences, optionals: not tensors
        return None


def _from_files(root: Path) -> Iterator[Case]:
    for d in sorted(root.glob("test_*")):
        data = d / "test_data_set_0"
        if not (d / "model.onnx").is_file() or not data.is_dir():
            continue
        ins = [_read_pb(p) for p in sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        outs = [_read_pb(p) for p in sorted(data.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        if any(a is None for a in ins + outs):
            continue
        yield Case(d.name, onnx.load(str(d / "model.onnx")), ins, outs)


def _generated() -> Iterator[Case]:
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    for c in cases:
        if c.model is None or not c.data_sets:
            continue
        ins, outs = c.data_sets[0]
        if not all(isinstance(a, np.ndarray | np.generic) for a in [*ins, *outs]):
            continue  # sequences, optionals
        yield Case(c.name, c.model, [np.asarray(a) for a in ins], [np.asarray(a) for a in outs])


def node_cases() -> list[Case]:
    """Every node test case of the installed onnx package (files if shipped, else generated)."""
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"
    cases = list(_from_files(root)) if root.is_dir() else []
    return cases or list(_generated())


# operator -> the input positions that fix shapes (vdla compiles for fixed shapes: the test's values are bound)
SHAPE_INPUTS = {"Resize": (1, 2, 3)}


def freeze_shape_inputs(case: Case) -> Case:
    """The case with its graph inputs that fix shapes turned into initializers holding the test's values:
    int64 inputs (shapes, axes, pads: never a vdla runtime value) and the inputs in :data:`SHAPE_INPUTS`
    positions (Resize's roi, scales and sizes); other float and int8/int32 inputs stay inputs."""
    inits = {t.name for t in case.model.graph.initializer}
    graph_inputs = [i for i in case.model.graph.input if i.name not in inits]
    shape_names = {
        n.input[i] for n in case.model.graph.node for i in SHAPE_INPUTS.get(n.op_type, ()) if i < len(n.input)
    }
    frozen = [
        k
        for k, vi in enumerate(graph_inputs)
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64 or vi.name in shape_names
    ]
    if not frozen or len(graph_inputs) != len(case.inputs):
        return case
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    for k in frozen:
        model.graph.initializer.append(numpy_helper.from_array(case.inputs[k], graph_inputs[k].name))
    keep = [vi for k, vi in enumerate(graph_inputs) if k not in frozen]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    inputs = [a for k, a in enumerate(case.inputs) if k not in frozen]
    return Case(case.name, model, inputs, case.outputs)


def considered(case: Case) -> bool:
    """Whether every operator of the case is one the importer maps."""
    return set(case.ops) <= set(SUPPORTED)


def _compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, float, str]:
    got = np.asarray(got)
    if want.dtype.kind == "f":
        if got.dtype.kind != "f":
            return False, float("inf"), f"dtype {got.dtype} where {want.dtype} was expected"
        if got.shape != want.shape:
            return False, float("inf"), f"shape {got.shape} where {want.shape} was expected"
        w = want.astype(np.float64)
        g = got.astype(np.float64)
        finite = np.isfinite(w)
        scale = max(1.0, float(np.abs(w[finite]).max())) if finite.any() else 1.0
        ok = np.allclose(g, w, rtol=RTOL, atol=ATOL * scale, equal_nan=True)
        err = float(np.nanmax(np.abs(g[finite] - w[finite]))) if finite.any() else 0.0
        return bool(ok), err, "" if ok else f"max abs error {err:.3g} (scale {scale:.3g})"
    if got.dtype.kind not in "iu" and want.dtype.kind in "iub":
        return False, float("inf"), f"dtype {got.dtype} where {want.dtype} was expected"
    if got.shape != want.shape:
        return False, float("inf"), f"shape {got.shape} where {want.shape} was expected"
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    err = float(diff.max()) if diff.size else 0.0
    return err == 0, err, "" if err == 0 else f"integer outputs differ by up to {err:.0f}"


def run_case(case: Case) -> Result:
    """Import, simplify (verified after each pass), compile for the CPU and run one case."""
    res = Result(case.name, case.ops, "pass")
    t0 = time.perf_counter()
    stage = "import"
    try:
        graph = import_onnx(freeze_shape_inputs(case).model)
        stage = "simplify"
        graph = simplify(graph, verify=True)
        stage = "compile"
        compiled = compile_graph(graph)
    except (UnsupportedError, FrontendError) as e:
        res.status, res.stage, res.message = "unsupported", stage, str(e)
        res.seconds = time.perf_counter() - t0
        if "a bug in vdla's importer" in str(e):
            res.status = "fail"
        return res
    except Exception as e:  # a crash is a failure
        res.status, res.stage, res.message = "fail", stage, f"{type(e).__name__}: {e}"
        res.seconds = time.perf_counter() - t0
        return res
    stage = "run"
    try:
        feeds = {  # vdla takes a uint8 input as int32 holding the same values
            name: a.astype(np.int32) if a.dtype == np.uint8 else a
            for name, a in zip(graph.inputs, freeze_shape_inputs(case).inputs, strict=True)
        }
        outs = compiled(**feeds)
        errs = []
        for name, want in zip(graph.outputs, case.outputs, strict=True):
            ok, err, why = _compare(outs[name], want)
            res.max_error = err if res.max_error is None else max(res.max_error, err)
            if not ok:
                errs.append(f"output {name!r}: {why}")
        if errs:
            res.status, res.stage, res.message = "fail", "compare", "; ".join(errs)
    except (VdlaError, Exception) as e:
        res.status, res.stage, res.message = "fail", stage, f"{type(e).__name__}: {e}"
    res.seconds = time.perf_counter() - t0
    return res


def run_all(select: str | None = None) -> tuple[list[Result], int]:
    """Results of every considered case (and the number of cases looked at)."""
    cases = node_cases()
    results = []
    for case in cases:
        if select and select not in case.name:
            continue
        if case.name in SKIP or not considered(case):
            continue
        results.append(run_case(case))
    return results, len(cases)


def per_operator(results: list[Result]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = defaultdict(lambda: {"pass": 0, "unsupported": 0, "fail": 0})
    for r in results:
        for op in r.ops:
            table[op][r.status] += 1
    return dict(sorted(table.items()))


def markdown(results: list[Result], total: int, seconds: float) -> str:
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "unsupported", "fail")}
    lines = [
        "# ONNX conformance of the float CPU path",
        "",
        "Generated by `python benchmarks/onnx_conformance.py` (checked by `tests/test_onnx_conformance.py`).",
        "",
        f"The node tests of onnx {onnx.__version__} ({total} cases) whose operators are all among the ones",
        "vdla's importer maps run through `import_onnx` -> `simplify` -> `vdla.cpu_fallback.compile_graph` in",
        "float32 and are compared with the expected outputs (rtol 1e-4, atol 1e-4 x the largest expected",
        "magnitude; integer outputs exact). A case either passes or is refused before anything runs",
        "(`UnsupportedError` / `FrontendError`, message below); a wrong answer fails the test.",
        "",
        "The cases come from `<onnx>/backend/test/data/node` when the onnx wheel ships those files, else",
        "they are generated in memory by `onnx.backend.test.case.node.collect_testcases` (same models, inputs",
        "and expected outputs). vdla compiles for fixed shapes, so int64 inputs (shapes, axes, pads) and",
        "Resize's roi/scales/sizes inputs are bound as constants holding the test's values; uint8 inputs and",
        "outputs are passed as int32 holding the same values (inside the graph a uint8 tensor is int8",
        "`value - 128`, exactly).",
        "",
        f"**{counts['pass']} passed, {counts['unsupported']} unsupported, {counts['fail']} failed** of "
        f"{len(results)} considered cases ({seconds:.1f} s).",
        "",
        f"Operators the importer maps ({len(SUPPORTED)}): {', '.join(SUPPORTED)}. Any node whose inputs are all",
        "constants is evaluated at import (ONNX reference implementation), whatever its operator.",
        "",
        "| operator | passed | unsupported | failed |",
        "|---|---|---|---|",
    ]
    for op, c in per_operator(results).items():
        lines.append(f"| {op} | {c['pass']} | {c['unsupported']} | {c['fail']} |")
    lines += ["", "## Unsupported cases", "", "| case | refused by | message |", "|---|---|---|"]
    for r in results:
        if r.status == "unsupported":
            msg = r.message.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r.name} | {r.stage} | {msg} |")
    failed = [r for r in results if r.status == "fail"]
    if failed:
        lines += ["", "## Failed cases", "", "| case | stage | message |", "|---|---|---|"]
        for r in failed:
            msg = r.message.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {r.name} | {r.stage} | {msg} |")
    if SKIP:
        lines += ["", "## Skipped cases", ""] + [f"- {k}: {v}" for k, v in sorted(SKIP.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--md", default=str(ROOT / "docs" / "onnx_conformance.md"), help="Markdown report ('' for none)")
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("-k", dest="select", help="only cases whose name contains this")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    results, total = run_all(args.select)
    seconds = time.perf_counter() - t0
    table = per_operator(results)
    print(f"{'operator':<22} {'pass':>5} {'unsup':>5} {'fail':>5}")
    for op, c in table.items():
        print(f"{op:<22} {c['pass']:>5} {c['unsupported']:>5} {c['fail']:>5}")
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "unsupported", "fail")}
    print(f"{counts['pass']} passed, {counts['unsupported']} unsupported, {counts['fail']} failed "
          f"of {len(results)} considered ({total} cases, {seconds:.1f} s)")  # fmt: skip
    for r in results:
        if r.status == "fail":
            print(f"FAIL {r.name} [{r.stage}]: {r.message}")
    if args.md and not args.select:
        Path(args.md).write_text(markdown(results, total, seconds))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
