"""JIT engine, caches, kernel call checks, graph stacking, CLI and benchmark contract."""

import json
import sys
import threading

import numpy as np
import pytest

from vdla.cli import main as vdla
from vdla.cpu_fallback import (
    Graph,
    Node,
    TensorType,
    UnsupportedError,
    clear_cache,
    compile_chain,
    compile_graph,
    ew,
    functions,
    fuse,
    get_kernel,
    jit,
    set_disk_cache,
)
from vdla.cpu_fallback.specs import make_pool2d

set_disk_cache(None)


def test_memory_cache_by_signature():
    x = np.zeros((3, 5), np.float32)
    k1 = compile_chain(x, [ew.add(1.5), ew.relu()])
    assert compile_chain(np.ones((3, 5), np.float32), [ew.add(1.5), ew.relu()]) is k1
    assert compile_chain(x, [ew.add(2.5), ew.relu()]) is not k1  # constants are part of the signature
    assert compile_chain(np.zeros((3, 6), np.float32), [ew.add(1.5), ew.relu()]) is not k1


def test_disk_cache_roundtrip(tmp_path):
    spec = make_pool2d(TensorType((1, 2, 7, 7), "float32"), "max", 3, 2, 1)
    x = np.random.default_rng(0).standard_normal((1, 2, 7, 7)).astype(np.float32)
    try:
        set_disk_cache(tmp_path)
        clear_cache()
        built = get_kernel(spec)
        assert not built.from_disk and len(list(tmp_path.glob("*.o"))) == 1
        clear_cache()
        loaded = get_kernel(spec)
        assert loaded.from_disk and loaded is not built
        np.testing.assert_array_equal(loaded(x), built(x))
    finally:
        set_disk_cache(None)


def test_disk_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setattr(jit, "_disk_override", [])
    monkeypatch.setenv("VDLA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("VDLA_CPU_DISK_CACHE", raising=False)
    assert jit.disk_cache_dir() == tmp_path / "cpu"
    monkeypatch.setenv("VDLA_CPU_DISK_CACHE", "0")
    assert jit.disk_cache_dir() is None


def test_kernel_works_in_place_on_buffers_without_copies():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.empty_like(x)
    kernel = compile_chain(x, [ew.mul(2.0)])
    assert kernel(x, out=out) is out
    np.testing.assert_array_equal(out, x * 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((np.zeros((3, 4), np.float64),), "float64"),
        ((np.zeros((4, 3), np.float32),), r"\(4, 3\)"),
        ((np.zeros((3, 8), np.float32)[:, ::2],), "C-contiguous"),
        (([[0.0] * 4] * 3,), "numpy array"),
        ((), "expected 1 input"),
    ],
)
def test_kernel_rejects_mismatched_arrays(args, message):
    kernel = compile_chain(np.zeros((3, 4), np.float32), [ew.relu()])
    with pytest.raises(UnsupportedError, match=f"^chain: .*{message}"):
        kernel(*args)


def test_kernel_rejects_bad_out():
    x = np.zeros((3, 4), np.float32)
    kernel = compile_chain(x, [ew.relu()])
    with pytest.raises(UnsupportedError, match="overlap"):
        kernel(x, out=x)
    with pytest.raises(UnsupportedError, match="read-only"):
        ro = np.zeros((3, 4), np.float32)
        ro.flags.writeable = False
        kernel(x, out=ro)


def test_kernel_calls_keep_reference_counts_and_run_from_threads():
    """A kernel call returns a new reference to ``out`` (or refuses), leaks none, and works from threads."""
    x = np.ones((4, 512, 64), np.float32)  # 1 MiB of arrays: runs without the GIL
    out = np.empty_like(x)
    kernel = compile_chain(x, [ew.add(1.0)])
    counts = sys.getrefcount(x), sys.getrefcount(out)
    for _ in range(50):
        assert kernel(x, out=out) is out
        with pytest.raises(UnsupportedError, match="out has"):
            kernel(x, out=np.empty((4, 64, 512), np.float32))
    assert (sys.getrefcount(x), sys.getrefcount(out)) == counts
    outs = [np.empty_like(x) for _ in range(4)]
    threads = [threading.Thread(target=lambda o=o: [kernel(x, out=o) for _ in range(20)]) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for o in outs:
        np.testing.assert_array_equal(o, 2.0)


class Tagged(np.ndarray):
    """An ndarray subclass: valid input, though not a plain ndarray for the generated checks."""


def test_kernel_accepts_subclasses_and_partial_overlap_is_refused():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    kernel = compile_chain(x, [ew.add(1.0)])
    np.testing.assert_array_equal(kernel(x.view(Tagged)), x + 1)
    out = np.zeros((3, 4), np.float32).view(Tagged)
    assert kernel(x.view(Tagged), out=out) is out
    np.testing.assert_array_equal(out, x + 1)
    np.testing.assert_array_equal(kernel(x, out=None), x + 1)
    with pytest.raises(TypeError, match="outt"):
        kernel(x, outt=out)
    buf = np.zeros(24, np.float32)
    with pytest.raises(UnsupportedError, match="overlap"):
        kernel(buf[:12].reshape(3, 4), out=buf[6:18].reshape(3, 4))


def test_ops_accept_non_contiguous_views():
    x = np.arange(48, dtype=np.float32).reshape(4, 12)[:, ::3]
    np.testing.assert_array_equal(functions.relu(x - 20), np.maximum(x - 20, 0))


def small_graph():
    rng = np.random.default_rng(0)
    nodes = [
        Node("conv2d", ("x", "w", "b"), "acc", {"padding": 1}),
        Node("requantize", ("acc",), "q", {"multiplier": 1 << 2, "shift": 10, "lo": -128, "hi": 127}),
        Node("relu", ("q",), "r"),
        Node("max_pool2d", ("r",), "p", {"kernel": 2}),
        Node("add", ("p", "skip"), "s"),  # reads graph input "skip"
        Node("clip", ("s",), "c", {"lo": -100, "hi": 100}),
        Node("cast", ("c",), "y", {"dtype": "int8"}),
        Node("pack_blocked", ("y",), "yb", {"batch": 1, "block": 4}),
        Node("unpack_blocked", ("yb",), "u", {"channels": 6}),
        Node("reshape", ("u",), "flat", {"shape": (1, -1)}),
        Node("dequantize", ("flat",), "f", {"scale": 0.5, "zero_point": 0}),
        Node("sigmoid", ("f",), "g"),
        Node("mul", ("g", "f"), "swish"),  # two readers of "f": not fused with dequantize
    ]
    params = {
        "w": rng.integers(-128, 128, (6, 3, 3, 3), dtype=np.int8),
        "b": rng.integers(-100, 100, 6, dtype=np.int32),
    }
    inputs = {"x": TensorType((1, 3, 8, 8), "int8"), "skip": TensorType((1, 6, 4, 4), "int8")}
    return Graph(inputs, nodes, ["swish", "r"], params)


def test_fuse_stacks_elementwise_runs_and_conv_epilogues():
    graph = small_graph()
    groups = [[n.output for n in g] for g in fuse(graph)]
    # "r" is a graph output, so the epilogue stops there; "f" has two readers
    assert groups == [
        ["acc", "q", "r"],
        ["p"],
        ["s", "c", "y"],
        ["yb"],
        ["u"],
        ["flat"],
        ["f"],
        ["g", "swish"],
    ]


def test_compiled_graph_matches_its_stages_evaluated_in_numpy():
    graph = small_graph()
    compiled = compile_graph(graph)
    rng = np.random.default_rng(1)
    feeds = {
        "x": rng.integers(-128, 128, (1, 3, 8, 8), dtype=np.int8),
        "skip": rng.integers(-128, 128, (1, 6, 4, 4), dtype=np.int8),
    }
    outs = compiled(**feeds)
    env = dict(compiled.params) | feeds
    for stage in compiled.groups:
        env[stage.output] = stage.evaluate(*(env[a] for a in stage.args))
    np.testing.assert_array_equal(outs["r"], env["r"])
    np.testing.assert_allclose(outs["swish"], env["swish"], rtol=3e-6)
    assert len(compiled.groups) == 8


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (Node("lrn", ("x",), "y"), "^lrn: no CPU kernel"),
        (Node("add", ("x",), "y"), "^add: .*operand b"),
        (Node("cast", ("x",), "y"), "^cast: needs attributes"),
        (Node("relu", ("x",), "y", {"slope": 0.1}), "^relu: unknown attributes"),
        (Node("max_pool2d", ("x",), "y", {"kernel": 2, "ceil_mode": 1}), "^max_pool2d: bad attributes"),
        (Node("reshape", ("x",), "y", {"shape": (5, -1)}), "^reshape: cannot reshape"),
    ],
)
def test_graph_errors_name_the_operator(node, message):
    graph = Graph({"x": TensorType((1, 2, 4, 4), "float32")}, [node], ["y"])
    with pytest.raises(UnsupportedError, match=message):
        compile_graph(graph)


def test_graph_requantize_defaults_to_the_int8_range():
    graph = Graph(
        {"x": TensorType((3, 4), "int32")},
        [Node("requantize", ("x",), "y", {"multiplier": 1, "shift": 0})],
        ["y"],
    )
    x = np.array([[-1000, -5, 5, 1000]] * 3, np.int32)
    np.testing.assert_array_equal(compile_graph(graph)(x=x)["y"], np.clip(x, -128, 127))


def test_resnet18_cpu_kernels_compile_and_run_correctly(tmp_path):
    """The compile time is a benchmark figure (benchmarks/cpu_fallback.py), not asserted: machines differ."""
    out = tmp_path / "out.json"
    assert vdla(["cpu-bench", "--suite", "resnet18", "--repeat", "1", "--json", str(out)]) == 0
    (record,) = json.loads(out.read_text())
    assert record["correct"] and record["compile_s"] > 0


def test_cli_registers_cpu_bench_and_writes_the_json_contract(tmp_path):
    out = tmp_path / "out.json"
    assert vdla(["cpu-bench", "--suite", "layout", "--repeat", "1", "--json", str(out)]) == 0
    records = json.loads(out.read_text())
    assert len(records) == 3
    for r in records:
        assert {"name", "shape", "jit_s", "numpy_s", "speedup_vs_numpy", "compile_s", "correct"} <= set(r)
        assert r["correct"] is True and r["jit_s"] > 0 and r["speedup_vs_numpy"] > 0


def test_cpu_bench_reports_seconds_per_call(tmp_path):
    """Times are the benchmark's figures, not asserted against a bound (machines differ)."""
    out = tmp_path / "out.json"
    argv = ["cpu-bench", "--suite", "layout", "--only", "transpose_nchw_to_nhwc_int8", "--repeat", "3"]
    assert vdla([*argv, "--json", str(out)]) == 0
    (record,) = json.loads(out.read_text())
    assert record["jit_s"] > 0 and record["numpy_s"] > 0 and record["correct"]
