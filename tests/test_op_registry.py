"""The operator registry: every operator defined once, and every consumer reading that one definition."""

import dataclasses
import inspect
import itertools

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from vdla.cpu_fallback import compile_graph, functions, fuse, get_kernel, kernels  # noqa: E402
from vdla.cpu_fallback.specs import Spec, make_chain  # noqa: E402
from vdla.cpu_fallback.stacking import resolve_steps, spec_factory  # noqa: E402
from vdla.graph import ew, oracle  # noqa: E402
from vdla.graph.ew import EW, Const, EwStep, node_steps  # noqa: E402
from vdla.graph.fusion import EPILOGUE_ANCHORS, fuse_ops  # noqa: E402
from vdla.graph.graph import Graph, Node  # noqa: E402
from vdla.graph.interp import evaluate  # noqa: E402
from vdla.graph.ops import OPS, VIEW, infer_types  # noqa: E402
from vdla.graph.types import DTYPES, TensorType, UnsupportedError  # noqa: E402

SHAPE = (3, 41)


def test_every_operator_names_a_real_cpu_kernel_and_accelerator_lowering():
    from vdla.model.lowering import LOWERINGS, AccelLowering

    for name, d in OPS.items():
        if d.cpu is not None and d.cpu != VIEW:
            assert callable(spec_factory(d.cpu)), name
    for name, lowering in LOWERINGS.items():
        assert name in OPS and isinstance(lowering, AccelLowering), name
        assert all(callable(getattr(lowering, f.name)) for f in dataclasses.fields(lowering)), name
    assert LOWERINGS["conv2d"] is LOWERINGS["dense"] and LOWERINGS["max_pool2d"] is LOWERINGS["global_sum_pool"]
    assert {n for n, d in OPS.items() if d.epilogue_step} == {n for n, d in EW.items() if d.epilogue_step}
    assert {n for n, d in OPS.items() if d.ew is not None} == set(EW)
    assert EPILOGUE_ANCHORS == ("conv2d", "dense")
    assert OPS["reshape"].cpu == VIEW and OPS["batch_norm"].cpu is None


def _kernel_specs() -> set[type]:
    """Every kernel spec class: the dataclasses deriving from Spec, at any depth."""
    found, todo = set(), [Spec]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if dataclasses.is_dataclass(cls):
            found.add(cls)
    return found


def test_every_kernel_spec_has_its_numpy_semantics_and_an_emitter():
    """Each kernel spec defines Spec.evaluate, what its kernel must return (an abstract method: a spec without
    it cannot be made), and the specs the code generator emits are exactly the Spec subclasses."""
    specs = _kernel_specs()
    assert len(specs) >= 29
    assert [c.__name__ for c in specs if inspect.isabstract(c)] == []
    assert specs == set(kernels._emit.registry) - {object}


def test_every_elementwise_operator_has_a_step_constructor_and_a_cpu_function():
    """``ew.<api>`` and ``functions.<api>`` are made from each EwDef (a module global of that name would hide them),
    and a constructed step is the one a graph node of the operator gives (every attribute, defaults too)."""
    for d in EW.values():
        make = getattr(ew, d.api)
        assert make is ew.step_constructor(d.api), d.name
        assert getattr(functions, d.api) is functions.elementwise_function(d.api), d.name
        assert d.api in dir(ew) and d.api in dir(functions)
        required = [p.name for p in inspect.signature(make).parameters.values() if p.default is p.empty]
        args = {n: "int32" if n == "dtype" else 3 for n in required}
        step = make(**args)
        given = dict(zip(d.operands, step.operands, strict=True)) | {n: args[n] for n, _ in d.attrs if n in args}
        node = Node(d.name, ("x",), "y", given)
        assert resolve_steps(None, [step]).steps == node_steps([node], ["x"]), d.name
    assert ew.maximum(1).op == "max" and ew.quantize(0.5).operands == (0.5, 0)
    with pytest.raises(AttributeError, match="'max' goes by 'maximum'"):
        functions.max  # noqa: B018
    assert ew.cast(np.int8).attrs == {"dtype": "int8"}
    x = np.arange(-4, 4, dtype=np.int32)
    np.testing.assert_array_equal(functions.rshift(x, 1), functions.elementwise(x, [ew.Step("rshift", (1,))]))


def _steps(op: str):
    """Every step of ``op`` over a few constant operands and attribute values that its rule accepts, with
    the dtype of the value it takes."""
    d = EW[op]
    required = [k for k, v in d.attrs if v is None]
    for value, operands, attrs in itertools.product(
        DTYPES,
        itertools.product((Const(2), Const(0.25)), repeat=len(d.operands)),
        itertools.product(DTYPES, repeat=len(required)),
    ):
        step = EwStep(op, operands, tuple(zip(required, attrs, strict=True)))
        try:
            chain = make_chain((TensorType(SHAPE, value),), (step,))
        except UnsupportedError:
            continue
        yield chain


def _values(dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "float32":
        x = (rng.standard_normal(SHAPE) * 6).astype(np.float32)
        x.flat[:7] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -120.0]
        return x
    if dtype == "bool":
        return rng.integers(0, 2, SHAPE).astype(bool)
    lo, hi = (-128, 128) if dtype == "int8" else (-(2**31), 2**31)
    return rng.integers(lo, hi, SHAPE, dtype=np.int64).astype(dtype)


@pytest.mark.parametrize("op", sorted(EW))
def test_jit_kernel_and_numpy_semantics_come_from_one_definition(op):
    """The JIT kernel of every elementwise operator equals its numpy semantics: bit for bit, except where
    the backends' exp, log and tanh differ (a few ulp; see vdla.graph.ewmath)."""
    rng = np.random.default_rng(0)
    chains = list(_steps(op))
    assert chains, f"{op}: no step accepted"
    for spec in chains:
        x = _values(spec.inputs[0].dtype, rng)
        got = get_kernel(spec)(x)
        with np.errstate(all="ignore"):
            want = oracle.chain(spec.steps, spec.inputs, [x], spec.out.shape, spec.out.dtype)
        assert got.dtype == want.dtype, spec
        if got.dtype != np.float32:
            # numpy leaves NaN -> int undefined (the JIT saturates it to the lower bound, docs/cpu_fallback.md)
            ok = ~np.isnan(x) if x.dtype == np.float32 else np.ones(x.shape, bool)
            np.testing.assert_array_equal(got[ok], want[ok], err_msg=str(spec))
            continue
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=str(spec))
        ok = ~np.isnan(want)
        np.testing.assert_array_max_ulp(got[ok], want[ok], maxulp=8)


def test_cpu_kernels_cut_the_groups_of_the_one_fusion_pass():
    """A broadcasting add after a conv is in another fuse_ops group: the CPU runs it as its own kernel
    (an epilogue cannot widen the conv's output)."""
    rng = np.random.default_rng(0)
    graph = Graph(
        {"x": TensorType((1, 2, 4, 4), "float32"), "y": TensorType((2, 3, 4, 4), "float32")},
        [
            Node("conv2d", ("x", "w"), "acc"),
            Node("add", ("acc", "y"), "s"),
            Node("relu", ("s",), "r"),
        ],
        ["r"],
        {"w": rng.standard_normal((3, 2, 1, 1)).astype(np.float32)},
    )
    fusion = fuse_ops(graph, infer_types(graph))
    assert fusion.group_of["acc"] != fusion.group_of["s"] == fusion.group_of["r"]
    assert [[n.output for n in run] for run in fuse(graph)] == [["acc"], ["s", "r"]]
    feeds = {
        "x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32),
        "y": rng.standard_normal((2, 3, 4, 4)).astype(np.float32),
    }
    np.testing.assert_allclose(compile_graph(graph)(**feeds)["r"], evaluate(graph, feeds)["r"], rtol=1e-6, atol=1e-6)
