"""The board-side install checks artifact signatures (docs/security.md): ``vdla[cli]`` brings cryptography, so
a board verifies a signed artifact's Ed25519 signature before any native code loads, ``vdla trust`` manages its
keys and ``vdla doctor`` reports the signature; a tampered signed artifact is refused by ``vdla run``. (The
artifacts here carry no native code: this environment has no LLVM to compile any; tests_arm runs signed ARM
code in emulated board userlands.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
from test_graph_qdq import S_A, residual_graph

from vdla.model import load_artifact
from vdla.model.pipeline import compile_graph_model
from vdla.model.trust import generate_key, load_signing_key


def _vdla(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    vdla = Path(sys.executable).parent / "vdla"
    return subprocess.run([str(vdla), *args], capture_output=True, text=True, timeout=300, env=env)


def test_the_board_install_verifies_signatures_and_refuses_a_tampered_artifact(tmp_path):
    key = generate_key(tmp_path / "key", "staff")
    artifact, _ = compile_graph_model(residual_graph(s_b=S_A, s_out=S_A), "pynq")
    signed = artifact.save(tmp_path / "m.vdla", key=load_signing_key(tmp_path / "key"))
    sig = load_artifact(signed).signature
    assert sig.verified and sig.key.raw == key.raw  # checked by this environment's cryptography

    env = {**os.environ, "VDLA_TRUST_DIR": str(tmp_path / "trust")}
    r = _vdla("trust", "add", str(tmp_path / "key.pub"), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _vdla("doctor", str(signed), "--json", env=env)
    found = {f["item"]: f for f in json.loads(r.stdout)}
    assert found["signature"]["status"] == "ok" and f"signed by key {key.id}" in found["signature"]["detail"]

    with zipfile.ZipFile(signed) as z:
        files = {n: z.read(n) for n in z.namelist()}
    image = bytearray(files["image.bin"])
    image[-1] ^= 1
    files["image.bin"] = bytes(image)
    with zipfile.ZipFile(tmp_path / "bad.vdla", "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 6, 6), np.float32))
    r = _vdla("run", str(tmp_path / "bad.vdla"), "--input", str(tmp_path / "x.npy"), env=env)
    assert r.returncode == 2 and "image.bin changed after signing" in r.stdout and "refused" in r.stdout
