"""Calibration data that does not fit the model is refused before anything compiles, with every mismatch named
at once (the input, what the model takes, what the array holds): missing and unknown arrays, wrong shapes, wrong
kinds of dtype; a calibration file that is missing, unreadable or not an .npz archive is refused naming its path.
Through :func:`check_calibration`, :func:`compile_model` and ``vdla compile --calib`` (exit code 2)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vdla.compiler import CompileError
from vdla.graph.calibrate import QuantizationError, check_calibration
from vdla.graph.types import TensorType
from vdla.model.pipeline import compile_model

INPUTS = {
    "x": TensorType((1, 2, 4, 4), "float32"),
    "y": TensorType((1, 3), "float32"),
    "ids": TensorType((1, 6), "int32"),
}


def _good(n: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"x": rng.normal(size=(n, 2, 4, 4)), "y": rng.normal(size=(n, 3)), "ids": np.arange(n * 6).reshape(n, 6)}


def test_every_mismatch_is_named_in_one_error():
    data = _good()
    data["x"] = np.zeros((4, 2, 4, 3), np.int64)  # shape and dtype both wrong: named together
    del data["y"]
    data["ids"] = np.zeros((4, 6), np.float32)  # floats for token ids
    data["z"] = np.zeros(3)
    with pytest.raises(QuantizationError) as e:
        check_calibration(INPUTS, data)
    msg = str(e.value)
    assert "does not match the model's inputs ['ids', 'x', 'y']: 4 problems" in msg
    assert "input 'y' is missing: the model takes float32 Nx3" in msg
    assert "array 'z' (float64 (3,)) is unknown" in msg
    assert "input 'x': shape (4, 2, 4, 3) does not match Nx2x4x4; dtype int64, the model takes float32" in msg
    assert "input 'ids': dtype float32, the model takes int32" in msg
    assert len(msg.splitlines()) == 5  # the summary, then one line per problem


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"y": None}, r"^calibration input 'y' is missing: the model takes float32 Nx3 \(input float32\[1x3\]\)$"),
        ({"w": np.zeros((4, 3))}, r"^calibration array 'w' \(float64 \(4, 3\)\) is unknown: the model's inputs"),
        ({"y": np.zeros((4, 4))}, r"^calibration input 'y': shape \(4, 4\) does not match Nx3 \(input"),
        ({"y": np.zeros((4, 3), np.int32)}, r"^calibration input 'y': dtype int32, the model takes float32: pass"),
        ({"ids": np.zeros((4, 6), np.float64)}, r"^calibration input 'ids': dtype float64, the model takes int32"),
        ({"ids": np.full((4, 6), 2**40)}, r"^calibration input 'ids' \(int64\) for int32: 24 value\(s\) outside"),
        ({"y": np.zeros((3, 3))}, r"^calibration arrays hold different numbers of samples"),
    ],
)
def test_each_kind_of_mismatch_alone(change, message):
    data = _good()
    for k, v in change.items():
        if v is None:
            del data[k]
        else:
            data[k] = v
    with pytest.raises(QuantizationError, match=message):
        check_calibration(INPUTS, data)


def test_integer_ids_and_masks_of_any_integer_dtype_are_taken_as_the_input_type():
    data = _good()
    data["ids"] = (np.arange(24).reshape(4, 6) % 2).astype(bool)  # a mask
    assert check_calibration(INPUTS, data)["ids"].dtype == np.int32
    data["ids"] = np.arange(24, dtype=np.int64).reshape(4, 1, 6)  # int64 token ids, (N, *shape)
    out = check_calibration(INPUTS, data)
    assert out["ids"].dtype == np.int32 and out["ids"].shape == (4, 6) and out["x"].dtype == np.float32


def _two_input_model() -> onnx.ModelProto:
    """x (1x2x4x4) -> conv -> relu -> a; y (1x3) -> relu -> b."""
    w = numpy_helper.from_array(np.random.default_rng(1).normal(size=(3, 2, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["a"]),
        helper.make_node("Relu", ["y"], ["b"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_inputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 4, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3])],
        [w],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _bad_data() -> dict[str, np.ndarray]:
    return {"x": np.zeros((4, 2, 4, 5), np.float32), "image": np.zeros((4, 3), np.float32)}


def test_compile_model_refuses_mismatched_calibration_naming_each():
    with pytest.raises(QuantizationError) as e:
        compile_model(_two_input_model(), _bad_data())
    msg = str(e.value)
    assert "3 problems" in msg and "input 'y' is missing" in msg and "array 'image'" in msg
    assert "input 'x': shape (4, 2, 4, 5) does not match Nx2x4x4" in msg


def test_compile_model_refuses_unreadable_calibration_files_naming_the_path(tmp_path):
    model = _two_input_model()
    cases = {
        tmp_path / "absent.npz": None,
        tmp_path / "one.npy": lambda p: np.save(p, np.zeros((4, 3), np.float32)),
        tmp_path / "text.npz": lambda p: p.write_text("x,y\n1,2\n"),
        tmp_path / "empty.npz": lambda p: p.write_bytes(b""),
        tmp_path / "cut.npz": lambda p: p.write_bytes((tmp_path / "good.npz").read_bytes()[:100]),
    }
    np.savez(tmp_path / "good.npz", x=np.zeros((4, 2, 4, 4), np.float32), y=np.zeros((4, 3), np.float32))
    for path, write in cases.items():
        if write is not None:
            write(path)
        with pytest.raises(CompileError, match=f"calibration file {path}: "):
            compile_model(model, path)
    with pytest.raises(CompileError, match=r"\.npy array, not an \.npz archive"):
        compile_model(model, tmp_path / "one.npy")


def test_cli_refuses_mismatched_and_unreadable_calibration_files(tmp_path, capsys):
    from vdla.cli import main

    onnx.save(_two_input_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "bad.npz", **_bad_data())
    out = tmp_path / "m.vdla"
    base = ["compile", str(tmp_path / "m.onnx"), "-o", str(out), "--calib"]
    assert main([*base, str(tmp_path / "bad.npz")]) == 2
    text = " ".join(capsys.readouterr().out.split())
    assert "error:" in text and "3 problems" in text and "input 'y' is missing" in text
    assert "array 'image' (float32 (4, 3)) is unknown" in text and "input 'x': shape (4, 2, 4, 5)" in text
    assert not out.exists()
    np.save(tmp_path / "one.npy", np.zeros((4, 3), np.float32))
    assert main([*base, str(tmp_path / "one.npy")]) == 2

    def flat(s: str) -> str:  # the console wraps a long path anywhere, inside a word too
        return "".join(s.split())

    assert flat(f"calibration file {tmp_path / 'one.npy'}: a single .npy array") in flat(capsys.readouterr().out)
    assert main([*base, str(tmp_path / "absent.npz")]) == 2
    assert flat(f"calibration file {tmp_path / 'absent.npz'}: not a readable .npz") in flat(capsys.readouterr().out)
    assert not out.exists()
