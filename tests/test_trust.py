"""Native code on trust only (docs/security.md): signed artifacts, the trust store, and which CPU kernels run.

An artifact with code for this machine runs it only when signed by a trusted key or with ``trust_native``;
otherwise the JIT (or numpy) runs, after a note saying why. A signed artifact changed after signing is refused."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import stat
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from artifact_edits import rewrite_zip, sample_input
from test_graph_qdq import S_A, residual_graph  # noqa: E402

import vdla.model.executor as executor  # noqa: E402
from vdla.cli import main  # noqa: E402
from vdla.cpu_fallback.native import NativeCodeError, machine, target_for_machine  # noqa: E402
from vdla.model import load, load_artifact  # noqa: E402
from vdla.model import trust as trust_mod  # noqa: E402
from vdla.model.pipeline import CompileOptions, compile_model  # noqa: E402
from vdla.model.trust import (  # noqa: E402
    SIGNATURE_MEMBER,
    SignatureError,
    TrustError,
    generate_key,
    load_signing_key,
    read_public_key,
    trust_key,
    trusted_keys,
    untrust_key,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ziglang") is None or importlib.util.find_spec("cryptography") is None,
    reason="the aot and sign extras are missing",
)
HERE = target_for_machine(machine())


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> Path:
    """Two key pairs, ``a`` and ``b`` (private key files; ``.pub`` beside them)."""
    d = tmp_path_factory.mktemp("keys")
    generate_key(d / "a", "alice")
    generate_key(d / "b")
    return d


@pytest.fixture(scope="module")
def signed(tmp_path_factory, keys) -> dict[str, Path]:
    """The residual model with code for this machine: unsigned, signed by ``a``, and without code; and a float
    model (CPU steps with parameters in cpu.npz) with code, signed by ``a``."""
    if HERE is None:
        pytest.skip(f"no known CPU target for this machine ({machine()})")
    onnx = pytest.importorskip("onnx")
    from vdla.zoo.models import small_resnet

    d = tmp_path_factory.mktemp("art")
    artifact = compile_model(residual_graph(s_b=S_A, s_out=S_A), None, CompileOptions("pynq", cpu_targets=("host",)))[0]
    paths = {
        "unsigned": artifact.save(d / "unsigned.vdla"),
        "signed": artifact.save(d / "signed.vdla", key=load_signing_key(keys / "a")),
    }
    artifact.cpu_code.clear()
    paths["no code"] = artifact.save(d / "nocode.vdla")
    onnx.save(small_resnet(seed=0), d / "float.onnx")
    float_model = compile_model(str(d / "float.onnx"), None, CompileOptions("pynq", cpu_targets=("host",)))[0]
    assert float_model.cpu_code and float_model._manifest()[1], "a model with code and arrays"
    paths["float"] = float_model.save(d / "float.vdla", key=load_signing_key(keys / "a"))
    return paths


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """An empty trust store of this test's own (VDLA_TRUST_DIR)."""
    monkeypatch.setenv("VDLA_TRUST_DIR", str(tmp_path / "trust"))
    return tmp_path / "trust"


def test_keygen_writes_a_private_key_of_mode_0600_and_never_overwrites(tmp_path):
    key = generate_key(tmp_path / "k", "staff")
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    assert (tmp_path / "k").read_text().startswith("-----BEGIN PRIVATE KEY-----")
    pub = read_public_key(str(tmp_path / "k.pub"))
    assert pub.raw == key.raw and key.text.startswith("ed25519:") and len(key.id) == 16
    assert load_signing_key(tmp_path / "k").public.raw == key.raw
    with pytest.raises(TrustError, match="exists: vdla never overwrites a key"):
        generate_key(tmp_path / "k")
    (tmp_path / "junk").write_text("not a key")
    with pytest.raises(TrustError, match="junk: not an unencrypted PEM private key"):
        load_signing_key(tmp_path / "junk")
    with pytest.raises(TrustError, match="not a vdla public key"):
        read_public_key(str(tmp_path / "junk"))
    with pytest.raises(TrustError, match="32 bytes, not 3"):
        read_public_key("ed25519:AAAA")


def test_trust_add_list_remove_round_trip(keys, store):
    a, b = read_public_key(str(keys / "a.pub")), read_public_key(str(keys / "b.pub"), "bob")
    assert trusted_keys() == []
    trust_key(a)
    trust_key(b)
    trust_key(b)  # again: still one file
    assert sorted(k.id for k in trusted_keys()) == sorted([a.id, b.id]) and len(list(store.glob("*.pub"))) == 2
    assert {k.id: k.name for k in trusted_keys()}[b.id] == "bob"
    with pytest.raises(TrustError, match="'0123456789abcdef' is not among the 2 key"):
        untrust_key("0123456789abcdef")
    assert untrust_key(a.id).raw == a.raw  # by ID
    assert untrust_key(b.text).raw == b.raw  # by the key itself
    assert trusted_keys() == []
    with pytest.raises(TrustError, match="is not among the 0 key"):
        untrust_key(a.text)
    (store / "bad.pub").write_text("ssh-ed25519 AAAA")
    with pytest.raises(TrustError, match="bad.pub in the trust store"):
        trusted_keys()


def test_an_unsigned_artifact_with_native_code_runs_on_the_jit_with_a_note(signed, store, capsys):
    module = load(signed["unsigned"])
    err = capsys.readouterr().err
    assert module.cpu_kernels == "jit"
    assert err.count("\n") == 1 and err.startswith(f"note: the artifact's {HERE.name} code is not loaded: ")
    assert "the artifact is unsigned" in err and "--trust-native" in err
    with pytest.raises(NativeCodeError, match="not loaded: the artifact is unsigned; vdla run --trust-native"):
        load(signed["unsigned"], cpu_kernels="native")
    native = load(signed["unsigned"], trust_native=True)  # for this one module
    assert native.cpu_kernels == "native" and capsys.readouterr().err == ""
    np.testing.assert_array_equal(native.run(sample_input(1)), module.run(sample_input(1)))
    assert load(signed["unsigned"]).cpu_kernels == "jit"  # and not afterwards


def test_a_signed_artifact_runs_native_only_where_its_key_is_trusted(signed, keys, store, capsys):
    a = read_public_key(str(keys / "a.pub"))
    assert load_artifact(signed["signed"]).signature.key.raw == a.raw
    module = load(signed["signed"])
    assert module.cpu_kernels == "jit" and f"signed by key {a.id}, which this machine does not trust" in (
        capsys.readouterr().err
    )
    trust_key(read_public_key(str(keys / "b.pub")))
    assert load(signed["signed"]).cpu_kernels == "jit"  # another key trusted: still not
    trust_key(a)
    module = load(signed["signed"])
    assert module.cpu_kernels == "native" and capsys.readouterr().err.count("note") == 1  # b's load only
    np.testing.assert_array_equal(
        module.run(sample_input(2)), load(signed["unsigned"], cpu_kernels="jit").run(sample_input(2))
    )
    untrust_key(a.id)
    assert load(signed["signed"]).cpu_kernels == "jit"


def test_an_artifact_without_native_code_runs_as_before(signed, store, capsys):
    module = load(signed["no code"])
    assert module.cpu_kernels == "jit" and capsys.readouterr().err == ""
    assert load_artifact(signed["no code"]).signature is None


def test_without_llvmlite_an_untrusted_artifact_runs_numpy_with_a_warning_naming_the_trust(
    signed, store, monkeypatch, capsys
):
    monkeypatch.setattr(executor, "_jit_source", lambda: None)  # a board
    module = load(signed["unsigned"])
    err = capsys.readouterr().err
    assert module.cpu_kernels == "reference"
    assert err.startswith("warning: CPU steps run on numpy reference kernels: the artifact's") and "unsigned" in err
    assert load(signed["unsigned"], trust_native=True).cpu_kernels == "native"


def _edit_manifest(files, ctx):
    m = json.loads(files["manifest.json"])
    m["meta"]["model"] = "other"
    files["manifest.json"] = json.dumps(m).encode()


def _edit_image(files, ctx=None):
    img = bytearray(files["image.bin"])
    img[len(img) // 2] ^= 1
    files["image.bin"] = bytes(img)


def _edit_arrays(files, ctx):
    with np.load(io.BytesIO(files["cpu.npz"])) as npz:
        arrays = {k: npz[k].copy() for k in npz.files}
    arrays[sorted(arrays)[0]].reshape(-1)[0] += 1
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    files["cpu.npz"] = buf.getvalue()


def _edit_code(files, ctx):
    name = f"cpu/{HERE.name}.so"
    files[name] = files[name][:64] + bytes([files[name][64] ^ 1]) + files[name][65:]


def _remove_code(files, ctx):
    """The code object and its manifest entry both gone."""
    del files[f"cpu/{HERE.name}.so"]
    m = json.loads(files["manifest.json"])
    m["cpu_code"] = {}
    files["manifest.json"] = json.dumps(m).encode()


def _edit_signature(files, field, value):
    sig = json.loads(files[SIGNATURE_MEMBER])
    sig[field] = value
    files[SIGNATURE_MEMBER] = json.dumps(sig).encode()


# how -> (edit(files, ctx), what the error says); ctx: "other" the signature.json of another artifact by the same
# key, "key_b" another trusted key
TAMPERING = {
    "manifest": (_edit_manifest, r"manifest\.json changed after signing"),
    "image": (_edit_image, r"image\.bin changed after signing"),
    "arrays": (_edit_arrays, r"cpu\.npz array\(s\) \['\d+/.*'\] changed after signing"),
    "code": (_edit_code, r"code object\(s\) \['cpu/.*\.so'\] changed after signing"),
    "member added": (lambda f, c: f.__setitem__("extra.txt", b"x"), r"member\(s\) \['extra\.txt'\] added"),
    "code removed": (
        _remove_code,
        r"member\(s\) \['cpu/.*\.so'\] removed; manifest\.json changed; code object\(s\) \['cpu/.*\.so'\] removed",
    ),
    "signature swapped": (
        lambda f, c: _edit_signature(f, "signature", json.loads(c["other"])["signature"]),
        "the signature does not verify with the key it names",
    ),
    "key swapped": (
        lambda f, c: _edit_signature(f, "public_key", c["key_b"]),
        "the signature does not verify with the key it names",
    ),
    "signature garbled": (
        lambda f, c: f.__setitem__(SIGNATURE_MEMBER, b"{"),
        "signature.json is not a vdla signature",
    ),
}


@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_a_tampered_signed_artifact_is_refused_naming_what_failed(how, signed, keys, store, tmp_path):
    other = load_artifact(signed["no code"]).save(tmp_path / "other.vdla", key=load_signing_key(keys / "a"))
    with zipfile.ZipFile(other) as z:
        ctx = {"other": z.read(SIGNATURE_MEMBER), "key_b": read_public_key(str(keys / "b.pub")).text}
    trust_key(read_public_key(str(keys / "a.pub")))
    trust_key(read_public_key(str(keys / "b.pub")))
    edit, message = TAMPERING[how]
    bad = rewrite_zip(signed["float"], tmp_path / "bad.vdla", lambda files: edit(files, ctx))
    for loader in (load_artifact, lambda p: load(p, trust_native=True), lambda p: load(p, cpu_kernels="reference")):
        with pytest.raises(SignatureError, match=message):
            loader(bad)
    assert main(["run", str(bad), "--trust-native"]) == 2


def test_where_cryptography_is_missing_the_hashes_are_checked_and_no_native_code_loads(
    signed, keys, store, monkeypatch, capsys
):
    trust_key(read_public_key(str(keys / "a.pub")))

    def missing():
        raise TrustError(f"signing and checking artifact signatures needs cryptography: {trust_mod.INSTALL}")

    monkeypatch.setattr(trust_mod, "_crypto", missing)
    art = load_artifact(signed["signed"])
    assert art.signature is not None and not art.signature.verified
    assert load(signed["signed"]).cpu_kernels == "jit"
    assert "cannot be checked here: pip install 'vdla[sign]'" in capsys.readouterr().err
    with pytest.raises(SignatureError, match="image.bin changed"):
        load_artifact(rewrite_zip(signed["signed"], signed["signed"].with_name("img.vdla"), _edit_image))


def test_vdla_compile_returns_a_module_that_runs_its_own_code():
    import vdla

    if HERE is None:
        pytest.skip(f"no known CPU target for this machine ({machine()})")
    module = vdla.compile(residual_graph(s_b=S_A, s_out=S_A), config="pynq", cpu_targets=("host",))
    assert module.cpu_kernels == "native"


def test_cli_compile_sign_trust_run_and_doctor(keys, store, tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from vdla.zoo.models import small_resnet

    model, out, x = tmp_path / "m.onnx", tmp_path / "m.vdla", tmp_path / "x.npy"
    onnx.save(small_resnet(seed=0), model)
    np.save(x, np.random.default_rng(3).normal(0, 1, (1, 3, 32, 32)).astype(np.float32))
    key = tmp_path / "staff"
    assert main(["trust", "keygen", str(key), "--name", "course staff"]) == 0
    pub = read_public_key(str(tmp_path / "staff.pub"))
    assert f"key {pub.id}: {pub.text}" in capsys.readouterr().out
    assert main(["compile", str(model), "-o", str(out), "--cpu-target", "host", "--sign", str(key)]) == 0
    assert f"signed by key {pub.id}" in capsys.readouterr().out

    def run(*extra: str) -> str:
        assert main(["run", str(out), "--input", str(x), "--output", str(tmp_path / "y.npz"), *extra]) == 0
        got = capsys.readouterr()
        return got.out + got.err

    assert "(jit kernels)" in run() and "(native kernels)" in run("--trust-native")
    assert main(["doctor", str(out), "--json"]) in (0, 1)
    found = {f["item"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["signature"]["status"] == "note" and "not trusted here" in found["signature"]["detail"]

    assert main(["trust", "add", str(tmp_path / "staff.pub"), "--name", "course staff"]) == 0
    assert main(["trust", "list", "--json"]) == 0
    capsys.readouterr()
    assert main(["trust", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"id": pub.id, "key": pub.text, "name": "course staff"}]
    assert "(native kernels)" in run()
    assert main(["doctor", str(out), "--json"]) in (0, 1)
    found = {f["item"]: f for f in json.loads(capsys.readouterr().out)}
    assert found["signature"]["status"] == "ok" and "(course staff), trusted here" in found["signature"]["detail"]
    assert f"its {HERE.name} code" in found["CPU code"]["detail"]

    assert main(["trust", "remove", pub.id]) == 0
    assert "(jit kernels)" in run()
    assert main(["trust", "remove", pub.id]) == 2 and "is not among" in capsys.readouterr().out
    assert main(["compile", str(model), "-o", str(out), "--sign", str(tmp_path / "nokey")]) == 2
    assert "nokey: not an unencrypted PEM private key" in capsys.readouterr().out


def test_a_signature_member_zipfile_cannot_open_is_a_signature_error(signed, tmp_path):
    """signature.json is not one of the members the artifact reader reads, so the signature reader meets its
    compression method itself: one Python's zipfile does not implement is refused, named, like any other."""
    path = rewrite_zip(signed["signed"], tmp_path / "method.vdla", lambda files: None)
    data = bytearray(path.read_bytes())
    name = SIGNATURE_MEMBER.encode()
    for sig, method_at in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):  # local header, central directory entry
        at = data.find(sig)
        while at >= 0:
            name_at = at + (30 if sig == b"PK\x03\x04" else 46)
            if data[name_at : name_at + len(name)] == name:
                data[at + method_at : at + method_at + 2] = (99).to_bytes(2, "little")  # no such method
            at = data.find(sig, at + 4)
    path.write_bytes(bytes(data))
    with pytest.raises(SignatureError, match="cannot read signature.json"):
        load_artifact(path)
