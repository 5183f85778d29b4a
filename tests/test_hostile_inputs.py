"""Hostile input at vdla's readers (docs/security.md): the read limit before allocation, zip members read by exact
name and never inflated past their size, the Hypothesis campaign of tests/hostile.py at a few thousand cases,
and each of its findings as a regression case."""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).parent))
import hostile  # noqa: E402

from vdla.config import ConfigError  # noqa: E402
from vdla.frontend.errors import FrontendError  # noqa: E402
from vdla.frontend.onnx import import_onnx  # noqa: E402
from vdla.graph.types import UnsupportedError  # noqa: E402
from vdla.isa import IsaError, assemble_file  # noqa: E402
from vdla.model import ArtifactError, load_artifact  # noqa: E402
from vdla.model.pipeline import CompileError, read_calib_file  # noqa: E402
from vdla.untrusted import ENV, default_max_bytes, max_read_bytes  # noqa: E402

# the in-process share of the campaign in make test, per reader: 3,000 cases in all (an ONNX case costs the most)
CASES = {"artifact": 800, "onnx": 600, "npz": 800, "asm": 800}


@pytest.mark.parametrize("target", hostile.TARGETS)
def test_every_seed_is_read(target):
    """The campaign starts from files the readers take: every seed (unmutated) reads without error."""
    for s in hostile.seeds()[target]:
        assert hostile.run_case(hostile.Case(target, s.name, (), s.data)) == "ok", s.name


@pytest.mark.parametrize("target", hostile.TARGETS)
def test_hostile_cases_succeed_or_are_refused_naming_the_file(target):
    outcomes: dict[str, int] = {}

    @seed(54)
    @settings(
        max_examples=CASES[target], database=None, deadline=None, phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(case=hostile.cases(target))
    def one(case):
        outcome = hostile.run_case(case)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1

    one()
    assert sum(outcomes.values()) == CASES[target]
    assert outcomes.get("ok", 0) and len(outcomes) > 1  # both: some cases read, some refused


def test_a_reader_breaking_its_contract_is_a_finding(monkeypatch):
    case = hostile.Case("asm", "random-0", (), hostile.seeds()["asm"][0].data)

    def crash(case, path):
        raise KeyError("x")

    monkeypatch.setattr(hostile, "read", crash)
    with pytest.raises(hostile.Finding, match="KeyError"):
        hostile.run_case(case)

    def anonymous(case, path):
        raise IsaError("something is wrong")

    monkeypatch.setattr(hostile, "read", anonymous)
    with pytest.raises(hostile.Finding, match="does not name the file"):
        hostile.run_case(case)

    def writes(case, path):
        (path.parent / "partial.out").write_bytes(b"x")

    monkeypatch.setattr(hostile, "read", writes)
    with pytest.raises(hostile.Finding, match="wrote"):
        hostile.run_case(case)

    def hangs(case, path):
        while True:
            pass

    monkeypatch.setattr(hostile, "read", hangs)
    with pytest.raises(hostile.Finding, match="no answer within 0.2 s"):
        hostile.run_case(case, seconds=0.2)


# ------------------------------------------------------------------------------------------------ the read limit


def test_the_read_limit_comes_from_the_argument_the_environment_or_the_board_dram(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert max_read_bytes() == default_max_bytes() == 256 << 20  # the largest preset DRAM window
    monkeypatch.setenv(ENV, "0x1000")
    assert max_read_bytes() == 4096 and max_read_bytes(10) == 10
    monkeypatch.setenv(ENV, "lots")
    with pytest.raises(ConfigError, match=f"{ENV}='lots'"):
        max_read_bytes()


def _seed(target: str, name: str) -> bytes:
    return next(s.data for s in hostile.seeds()[target] if s.name == name)


def test_an_artifact_over_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "m.vdla"
    path.write_bytes(_seed("artifact", "mlp"))
    assert load_artifact(path).steps
    with pytest.raises(ArtifactError, match=r"m.vdla: the file claims \d+ bytes, above the read limit of 1000"):
        load_artifact(path, max_bytes=1000)
    monkeypatch.setenv(ENV, "170000")  # the file fits; the manifest and the image (168256 bytes) together do not
    with pytest.raises(ArtifactError, match=r"member 'image.bin': the member \(with those read before\) claims 168256"):
        load_artifact(path)


def _rezip(data: bytes, **replace: bytes) -> bytes:
    members = hostile._members(data)
    return hostile._zip({**members, **replace})


def test_a_manifest_claiming_a_huge_tensor_is_refused_naming_it(tmp_path):
    data = _seed("artifact", "mlp")
    manifest = json.loads(hostile._members(data)["manifest.json"])
    name = next(iter(manifest["dram"]))
    manifest["dram"][name]["shape"] = [1 << 20, 1 << 20]
    path = tmp_path / "huge.vdla"
    path.write_bytes(_rezip(data, **{"manifest.json": json.dumps(manifest).encode()}))
    with pytest.raises(ArtifactError, match=f"huge.vdla: manifest dram '{name}': .* claims 1099511627776 bytes"):
        load_artifact(path)


def test_zip_members_are_read_by_exact_name_and_never_past_their_size(tmp_path):
    data = _seed("artifact", "residual")
    path = tmp_path / "m.vdla"
    members = hostile._members(data)
    path.write_bytes(hostile._zip({("../" + n if n == "image.bin" else n): b for n, b in members.items()}))
    with pytest.raises(ArtifactError, match=r"m.vdla: no member 'image.bin'"):
        load_artifact(path)
    path.write_bytes(hostile._zip([*members.items(), ("image.bin", b"")]))
    with pytest.raises(ArtifactError, match="member 'image.bin' appears twice"):
        load_artifact(path)
    path.write_bytes(hostile._bomb(members, "manifest.json"))  # 64 MiB of zeros declared as the manifest's size
    with pytest.raises(ArtifactError, match="member 'manifest.json': inflates past its declared size"):
        load_artifact(path)
    path.write_bytes(hostile._patch_size(data, "image.bin", 16))
    with pytest.raises(ArtifactError, match="member 'image.bin': inflates past its declared size of 16 bytes"):
        load_artifact(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.vdla"]  # nothing extracted


def _npy(header: dict, body: bytes) -> bytes:
    text = repr(header).encode() + b"\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + body


@pytest.mark.parametrize(
    ("header", "body", "message"),
    [
        (
            {"descr": "<f4", "fortran_order": False, "shape": (1 << 30, 1 << 30)},
            b"",
            "claims 4611686018427387904 bytes",
        ),
        ({"descr": "|O", "fortran_order": False, "shape": (2,)}, b"", "dtype object is not a numeric array"),
        ({"descr": "<f4", "fortran_order": False, "shape": (-2, 4)}, b"", "negative dimension"),
        ({"descr": "<f4", "fortran_order": False, "shape": (4,)}, bytes(12), "takes 16 bytes, the file holds 12"),
    ],
)
def test_a_calibration_file_claiming_a_bad_array_is_refused_before_allocation(tmp_path, header, body, message):
    path = tmp_path / "calib.npz"
    path.write_bytes(hostile._zip({"x.npy": _npy(header, body)}, zipfile.ZIP_STORED))
    with pytest.raises(CompileError, match=f"calibration file {path}: array 'x': .*{message}"):
        read_calib_file(path)


def test_calibration_arrays_read_as_numpy_wrote_them(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    path = tmp_path / "c.npz"
    np.savez_compressed(path, x=a, f=np.asfortranarray(a.astype(">f8")))
    got = read_calib_file(path)
    np.testing.assert_array_equal(got["x"], a)
    np.testing.assert_array_equal(got["f"], a)
    assert got["f"].flags.f_contiguous and got["x"].flags.writeable


def _model(initializer: onnx.TensorProto, input_dims=(1, 4)) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(input_dims))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(input_dims))
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [initializer])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_an_onnx_model_claiming_a_huge_tensor_is_refused_before_allocation(tmp_path):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 20, 1 << 20], raw_data=b"")
    path = tmp_path / "huge.onnx"
    onnx.save(_model(w), path)
    with pytest.raises(FrontendError, match="huge.onnx: initializer 'w': a float32 tensor .* claims 4398046511104"):
        import_onnx(path)
    ok = helper.make_tensor("w", TensorProto.FLOAT, [1, 4], np.ones(4, np.float32).tobytes(), raw=True)
    onnx.save(_model(ok, input_dims=(1 << 16, 1 << 16)), path)  # a 16 GiB input
    with pytest.raises(FrontendError, match=r"huge.onnx: input 'x': shape \(65536, 65536\) claims 17179869184"):
        import_onnx(path)
    onnx.save(_model(ok), path)
    assert import_onnx(path).inputs["x"].shape == (1, 4)
    with pytest.raises(FrontendError, match="the file claims"):
        import_onnx(path, max_bytes=64)


def test_an_onnx_external_data_file_outside_the_model_directory_is_refused(tmp_path):
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 4], np.ones(4, np.float32).tobytes(), raw=True)
    model = _model(w)
    t = model.graph.initializer[0]
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../secret.bin")
    (tmp_path / "secret.bin").write_bytes(bytes(16))
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "ext.onnx")
    with pytest.raises(FrontendError, match=r"ext.onnx: initializer 'w': its external data '../secret.bin' is not"):
        import_onnx(tmp_path / "m" / "ext.onnx")


# ------------------------------------------------------------------------------------------ the campaign's findings


def _onnx_case(tmp_path: Path, edit) -> Path:
    model = onnx.load_from_string(_seed("onnx", "mlp"))
    edit(model)
    path = tmp_path / "case.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_finding_reshape_copying_a_dimension_the_input_lacks(tmp_path):
    """Reshape with a 0 (copy the input's dimension) past the input's rank: an IndexError in the converter."""

    def edit(m):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
        shape = helper.make_tensor("s", TensorProto.INT64, [3], [1, 16, 0])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1])
        m.graph.CopyFrom(helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"])], "g", [x], [y], [shape]))

    with pytest.raises(UnsupportedError, match=r"node 'Reshape_0'.*copies \(0\) a dimension .*\(in .*case.onnx\)"):
        import_onnx(_onnx_case(tmp_path, edit))


def test_finding_a_float16_initializer_whose_data_does_not_match_its_shape(tmp_path):
    """A float16 initializer (rewritten as float32 first) with more data than its shape holds (the checker refuses
    too little only): numpy's reshape ValueError."""

    def edit(m):
        t = m.graph.initializer[0]
        t.CopyFrom(TensorProto(name=t.name, data_type=TensorProto.FLOAT16, dims=[2], raw_data=bytes(8)))

    with pytest.raises(FrontendError, match=r"case.onnx: tensor '\w+' \(float16\) cannot be read"):
        import_onnx(_onnx_case(tmp_path, edit))


def test_finding_a_name_that_is_not_utf8(tmp_path):
    """Protobuf hands a string field that is not UTF-8 over as bytes: a TypeError in the name check."""
    data = _seed("onnx", "mlp")
    name = onnx.load_from_string(data).graph.node[0].output[0].encode()
    path = tmp_path / "case.onnx"
    path.write_bytes(data.replace(name, b"\xff" * len(name)))
    with pytest.raises(FrontendError, match=r"case.onnx: node 0 output 0 in graph .* is not UTF-8 text"):
        import_onnx(path)


def test_a_converter_failing_with_a_python_error_names_the_node(tmp_path, monkeypatch):
    """A node whose converter fails with a Python error its checks did not foresee (the findings above, before
    their fixes) is reported as that node's UnsupportedError, naming the file, the node and the error."""
    from vdla.frontend.onnx_ops import CONVERTERS

    def broken(b, node):
        raise IndexError("tuple index out of range")

    monkeypatch.setitem(CONVERTERS, "Softmax", broken)
    with pytest.raises(
        UnsupportedError, match=r"node 'Softmax_\d'.*malformed \(IndexError: tuple index.*\(in .*case.onnx\)"
    ):
        import_onnx(_onnx_case(tmp_path, lambda m: None))


def test_assembler_files_that_are_not_text_or_too_large_are_refused(tmp_path):
    path = tmp_path / "p.s"
    path.write_bytes(b"finish\nload inp sram=0 dram=0x\xff y=1\n")
    with pytest.raises(IsaError, match=r"p.s:2: byte 30 \(0xff\) is not UTF-8 text"):
        assemble_file(path)
    path.write_bytes(b"finish\n" * 100)
    with pytest.raises(IsaError, match="p.s: the file claims 700 bytes, above the read limit of 100"):
        assemble_file(path, max_bytes=100)


def test_a_model_input_file_over_the_limit_is_refused(tmp_path, monkeypatch):
    from vdla.model.cli import ModelCliError, _inputs

    np.save(tmp_path / "x.npy", np.zeros(1000, np.float32))
    monkeypatch.setenv(ENV, "1024")
    with pytest.raises(ModelCliError, match="x.npy: the file claims 4128 bytes, above the read limit of 1024"):
        _inputs([str(tmp_path / "x.npy")], ["x"])
    buf = io.BytesIO()
    np.savez(buf, x=np.zeros(3, np.float32))
    (tmp_path / "x.npz").write_bytes(buf.getvalue())
    monkeypatch.delenv(ENV)
    assert _inputs([str(tmp_path / "x.npz")], ["x"])["x"].shape == (3,)


def test_finding_a_manifest_whose_cpu_code_is_not_an_object(tmp_path):
    """``cpu_code`` replaced by a list (an AttributeError), ``steps`` missing (a KeyError): read outside the
    manifest's named places before."""
    data = _seed("artifact", "residual")
    manifest = json.loads(hostile._members(data)["manifest.json"])
    manifest["cpu_code"] = [[manifest["cpu_code"]]]
    path = tmp_path / "case.vdla"
    path.write_bytes(_rezip(data, **{"manifest.json": json.dumps(manifest).encode()}))
    with pytest.raises(ArtifactError, match="case.vdla: manifest cpu_code: ValueError"):
        load_artifact(path)
    manifest["cpu_code"] = {}
    del manifest["steps"]
    path.write_bytes(_rezip(data, **{"manifest.json": json.dumps(manifest).encode()}))
    with pytest.raises(ArtifactError, match="case.vdla: manifest steps: KeyError: 'steps'"):
        load_artifact(path)


def test_finding_a_zip_of_a_version_python_does_not_read(tmp_path):
    """A central directory asking for zip version 25.5 to extract: zipfile's NotImplementedError."""
    data = _seed("artifact", "residual")
    path = tmp_path / "case.vdla"
    path.write_bytes(hostile._patch(data, "image.bin", 6, "<H", 255))
    with pytest.raises(ArtifactError, match=r"case.vdla: not a readable zip archive \(zip file version 25.5\)"):
        load_artifact(path)


def test_finding_a_lut_load_of_four_billion_rows_is_refused_without_a_set_of_them(tmp_path):
    """``load lut ... y=4294967296``: validation built the set of every table element the load claims (a
    MemoryError under the campaign's RLIMIT_AS); it now counts the table's own elements only."""
    from vdla.isa import validate_program
    from vdla.zoo.random_programs import pynq_full

    path = tmp_path / "case.s"
    path.write_text("load lut sram=0 dram=0x1004b0b y=4294967296 x=16 stride=16\nfinish\n")
    with pytest.raises(IsaError, match=r"case.s: invalid program:\n  instruction 0: LOAD: field y_size=4294967296"):
        validate_program(assemble_file(path), pynq_full(), where=str(path))
