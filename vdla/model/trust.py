"""Trust before native code runs: Ed25519 signatures of model artifacts, and the keys a machine trusts.

An artifact's ``cpu/<target>.so`` is loaded with ``ctypes``, which runs its constructors: native code from
whoever wrote the file. The manifest's SHA-256 of each code object only checks the file against itself. So the
executor loads native code only when the artifact's signature verifies against a key this machine trusts, or
when the user says so for one run (``vdla run --trust-native``, ``Module(..., trust_native=True)``); otherwise the
CPU steps run on the JIT or numpy (docs/security.md).

**What is signed.** A signed artifact carries one more zip member, ``signature.json``: the *payload* (the names
of every other member of the zip; the SHA-256 of the manifest as canonical JSON, of the DRAM image, of each
array of ``cpu.npz`` (dtype, shape and bytes) and of each code object), the signer's public key and the Ed25519
signature of the payload's canonical JSON. The digest is computed from the contents exactly as the reader
returns them (:func:`content_digest`), at signing from the file read back and at loading from what was loaded,
so what is checked is what runs.

**The rule.** An unsigned artifact loads as before and gets no native code. A signed one whose contents differ
from its payload (a byte of the manifest, image, arrays or code changed, a member added or removed) or whose
signature does not verify with the key it names is refused whole (:class:`SignatureError`): a tampered signed
artifact never falls back silently. A valid signature by a key this machine does not trust loads, without
native code. Where ``cryptography`` is missing the hashes are still checked, the Ed25519 signature cannot be:
such an artifact loads without native code.

**Keys.** A public key is written ``ed25519:`` and the base64 of its 32 bytes; its ID is the first 16 hex
digits of their SHA-256. :func:`generate_key` writes a private key (PEM, PKCS#8, mode 0600) and ``KEY.pub``.
The trust store (:func:`vdla.paths.trust_dir`) holds one ``<id>.pub`` file per trusted key.

Needs numpy only to load an artifact; ``cryptography`` (the ``sign`` extra, also in ``cli``) is imported only to
sign or to check a signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vdla.errors import VdlaError
from vdla.paths import trust_dir

SIGNATURE_MEMBER = "signature.json"
SIGNATURE_FORMAT = "vdla-signature"
SIGNATURE_VERSION = 1
KEY_PREFIX = "ed25519:"
MAX_SIGNATURE_BYTES = 16 << 20  # signature.json is read up to this size, whatever its header says
INSTALL = "pip install 'vdla[sign]' (the cryptography package)"


class TrustError(VdlaError, ValueError):
    """A key or trust store that cannot be used: unreadable, not Ed25519, not trusted."""


class SignatureError(VdlaError, ValueError):
    """A signed artifact that fails its signature: changed after signing, or a signature that does not verify."""


@dataclass(frozen=True)
class PublicKey:
    """An Ed25519 public key (its 32 bytes) and the name it is known by here (free text, may be empty)."""

    raw: bytes
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.raw) != 32:
            raise TrustError(f"an Ed25519 public key has 32 bytes, not {len(self.raw)}")

    @property
    def text(self) -> str:
        return KEY_PREFIX + base64.b64encode(self.raw).decode()

    @property
    def id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]


@dataclass(frozen=True)
class Signature:
    """An artifact's signature as loaded: the hashes matched its contents; ``verified``: the Ed25519 signature
    was checked too (False only where ``cryptography`` is missing)."""

    key: PublicKey
    verified: bool


def parse_public_key(text: str, name: str = "") -> PublicKey:
    """``ed25519:BASE64`` (anything after whitespace is ignored) as a key."""
    word = text.strip().split(maxsplit=1)[0] if text.strip() else ""
    if not word.startswith(KEY_PREFIX):
        raise TrustError(f"{word[:60]!r} is not a vdla public key ({KEY_PREFIX}BASE64, as vdla trust keygen prints)")
    try:
        raw = base64.b64decode(word[len(KEY_PREFIX) :], validate=True)
    except binascii.Error as e:
        raise TrustError(f"{word[:60]!r}: bad base64 ({e})") from e
    return PublicKey(raw, name)


def read_public_key(arg: str, name: str = "") -> PublicKey:
    """The key ``arg`` names: ``ed25519:BASE64`` itself, or a file holding it (``KEY.pub``)."""
    if arg.strip().startswith(KEY_PREFIX):
        return parse_public_key(arg, name)
    path = Path(arg)
    if not path.is_file():
        raise TrustError(f"{arg!r} is neither a public key ({KEY_PREFIX}BASE64) nor a file holding one")
    try:
        return parse_public_key(path.read_text(), name)
    except (OSError, UnicodeDecodeError) as e:
        raise TrustError(f"{path}: cannot read a public key ({e})") from e
    except TrustError as e:
        raise TrustError(f"{path}: {e}") from e


def _crypto():
    """cryptography's Ed25519 module, or a TrustError saying how to install it."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as e:
        raise TrustError(f"signing and checking artifact signatures needs cryptography: {INSTALL}") from e
    return ed25519


class SigningKey:
    """An Ed25519 private key read from a PEM file (:func:`load_signing_key`)."""

    def __init__(self, private: object, path: Path) -> None:
        from cryptography.hazmat.primitives import serialization

        self._private, self.path = private, path
        raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public = PublicKey(raw)

    def sign(self, data: bytes) -> bytes:
        return self._private.sign(data)


def generate_key(path: str | Path, name: str = "") -> PublicKey:
    """A new Ed25519 key: the private key at ``path`` (PEM, PKCS#8, unencrypted, mode 0600; an existing file is
    never overwritten) and its public key at ``path.pub`` (``ed25519:BASE64 NAME``); returns the public key."""
    from cryptography.hazmat.primitives import serialization

    path, pub = Path(path), Path(f"{path}.pub")
    for p in (path, pub):
        if p.exists():
            raise TrustError(f"{p} exists: vdla never overwrites a key (remove it, or choose another name)")
    private = _crypto().Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    key = SigningKey(private, path).public
    key = PublicKey(key.raw, name)
    pub.write_text(f"{key.text} {name}".rstrip() + "\n")
    return key


def load_signing_key(path: str | Path) -> SigningKey:
    """The Ed25519 private key in the PEM file ``path`` (as :func:`generate_key` writes it)."""
    ed25519 = _crypto()
    from cryptography.hazmat.primitives import serialization

    path = Path(path)
    try:
        private = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise TrustError(f"{path}: not an unencrypted PEM private key ({e})") from e
    if not isinstance(private, ed25519.Ed25519PrivateKey):
        raise TrustError(f"{path}: a {type(private).__name__}, not an Ed25519 key (vdla trust keygen makes one)")
    return SigningKey(private, path)


# -- what is signed -------------------------------------------------------------------------------------------
def _canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _array_sha(a: np.ndarray) -> str:
    return _sha(_canonical([a.dtype.str, list(a.shape)]) + np.ascontiguousarray(a).tobytes())


def content_digest(
    manifest: dict,
    image: np.ndarray,
    arrays: Mapping[str, np.ndarray],
    code: Mapping[str, bytes],
    members: Iterable[str],
) -> dict:
    """The payload a signature covers: the zip's member names (``signature.json`` left out) and the SHA-256 of
    the manifest (canonical JSON), the image, each array (dtype, shape, bytes) and each code object."""
    return {
        "format": SIGNATURE_FORMAT,
        "version": SIGNATURE_VERSION,
        "members": sorted(m for m in members if m != SIGNATURE_MEMBER),
        "manifest": _sha(_canonical(manifest)),
        "image": _sha(np.ascontiguousarray(image).tobytes()),
        "arrays": {k: _array_sha(arrays[k]) for k in sorted(arrays)},
        "code": {k: _sha(code[k]) for k in sorted(code)},
    }


def add_signature(path: str | Path, key: SigningKey, digest: dict) -> None:
    """Append ``signature.json`` (``digest`` signed by ``key``) to the zip at ``path``, which has none."""
    value = base64.b64encode(key.sign(_canonical(digest))).decode()
    doc = {"payload": digest, "public_key": key.public.text, "signature": value}
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z:
        if SIGNATURE_MEMBER in z.namelist():
            raise SignatureError(f"{path} is signed already")
        z.writestr(SIGNATURE_MEMBER, json.dumps(doc, indent=1))


def _differences(signed: dict, now: dict) -> list[str]:
    """What of ``now`` (the loaded contents' digest) differs from the ``signed`` payload, in words."""
    out = []
    added, removed = set(now["members"]) - set(signed["members"]), set(signed["members"]) - set(now["members"])
    if added:
        out.append(f"member(s) {sorted(added)} added")
    if removed:
        out.append(f"member(s) {sorted(removed)} removed")
    if signed["manifest"] != now["manifest"]:
        out.append("manifest.json changed")
    if signed["image"] != now["image"]:
        out.append("image.bin changed")
    for part, label in (("arrays", "cpu.npz array(s)"), ("code", "code object(s)")):
        a, b = signed[part], now[part]
        for verb, names in (
            ("changed", [k for k in a if k in b and a[k] != b[k]]),
            ("added", [k for k in b if k not in a]),
            ("removed", [k for k in a if k not in b]),
        ):
            shown = [f"cpu/{k}.so" for k in sorted(names)] if part == "code" else sorted(names)
            if shown:
                out.append(f"{label} {shown[:8]}{' ...' if len(shown) > 8 else ''} {verb}")
    return out


def _parse(doc: bytes, where: str) -> tuple[dict, PublicKey, bytes]:
    """The payload, key and signature of ``signature.json`` (refused, naming what is wrong, if malformed)."""
    try:
        sig = json.loads(doc)
        payload, key = sig["payload"], parse_public_key(sig["public_key"])
        value = base64.b64decode(sig["signature"], validate=True)
        if payload.get("format") != SIGNATURE_FORMAT or payload.get("version") != SIGNATURE_VERSION:
            raise ValueError(f"format {payload.get('format')!r} version {payload.get('version')!r}")
        for field in ("members", "manifest", "image", "arrays", "code"):
            payload[field]  # noqa: B018 - present
    except (ValueError, KeyError, TypeError, AttributeError, TrustError, binascii.Error) as e:
        raise SignatureError(f"{where}: {SIGNATURE_MEMBER} is not a vdla signature ({e}); refused") from e
    return payload, key, value


def check_signature(path: str | Path, doc: bytes | None, names: list[str], digest: dict) -> Signature | None:
    """Check the signature ``doc`` against ``digest``, the digest of the contents
    as loaded, with ``names`` the zip's members. None: unsigned. A signature that fails raises
    :class:`SignatureError` naming what failed; where ``cryptography`` is missing, the hashes are checked and the
    result says the signature was not (``verified`` False)."""
    if doc is None:
        return None
    where = str(path)
    payload, key, value = _parse(doc, where)
    dup = sorted({n for n in names if names.count(n) > 1})
    diff = ([f"member(s) {dup} appear more than once"] if dup else []) + _differences(payload, digest)
    if diff:
        raise SignatureError(
            f"{where}: signed by key {key.id}, but {'; '.join(diff)} after signing: the artifact was altered; "
            "refused (get it again from whoever signed it)"
        )
    try:
        ed25519 = _crypto()
    except TrustError:
        return Signature(key, verified=False)
    from cryptography.exceptions import InvalidSignature

    try:
        ed25519.Ed25519PublicKey.from_public_bytes(key.raw).verify(value, _canonical(digest))
    except InvalidSignature:
        raise SignatureError(
            f"{where}: the signature does not verify with the key it names ({key.id}): {SIGNATURE_MEMBER} was "
            "replaced or altered; refused (get the artifact again from whoever signed it)"
        ) from None
    return Signature(key, verified=True)


# -- the trust store ------------------------------------------------------------------------------------------
def _store(store: str | Path | None) -> Path:
    return Path(store) if store is not None else trust_dir()


def trusted_keys(store: str | Path | None = None) -> list[PublicKey]:
    """The keys this machine trusts (the ``*.pub`` files of the trust store, by ID); none where it does not
    exist. A file that is not a key is an error naming it."""
    d = _store(store)
    keys = []
    for f in sorted(d.glob("*.pub")) if d.is_dir() else []:
        text = f.read_text()
        parts = text.strip().split(maxsplit=1)
        try:
            keys.append(parse_public_key(text, parts[1] if len(parts) > 1 else ""))
        except TrustError as e:
            raise TrustError(f"{f} in the trust store: {e} (remove the file)") from e
    return keys


def trust_key(key: PublicKey, store: str | Path | None = None) -> Path:
    """Trust ``key`` here: write ``<id>.pub`` into the trust store (atomically; again: its name is replaced)."""
    d = _store(store)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{key.id}.pub"
    fd, tmp = tempfile.mkstemp(prefix=f".{key.id}.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(f"{key.text} {key.name}".rstrip() + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def untrust_key(spec: str, store: str | Path | None = None) -> PublicKey:
    """Stop trusting the key ``spec`` names (the key, a file holding it, or its ID); returns it."""
    keys = trusted_keys(store)
    spec = spec.strip()
    match = [k for k in keys if k.id == spec.lower()]
    if not match and (spec.startswith(KEY_PREFIX) or Path(spec).is_file()):
        raw = read_public_key(spec).raw
        match = [k for k in keys if k.raw == raw]
    if not match:
        raise TrustError(f"{spec!r} is not among the {len(keys)} key(s) trusted in {_store(store)} (vdla trust list)")
    (_store(store) / f"{match[0].id}.pub").unlink()
    return match[0]


def distrust_reason(signature: Signature | None, store: str | Path | None = None) -> str | None:
    """Why an artifact of ``signature`` (as loaded) may not load its native code here; None: it may (the key
    is trusted)."""
    if signature is None:
        return "the artifact is unsigned"
    if not signature.verified:
        return f"its signature (key {signature.key.id}) cannot be checked here: {INSTALL}"
    if all(k.raw != signature.key.raw for k in trusted_keys(store)):
        return f"it is signed by key {signature.key.id}, which this machine does not trust (vdla trust list)"
    return None


def describe(signature: Signature | None, store: str | Path | None = None) -> str:
    """The signature status in a line (for ``vdla doctor``)."""
    if signature is None:
        return "unsigned"
    reason = distrust_reason(signature, store)
    if reason is None:
        name = next((k.name for k in trusted_keys(store) if k.raw == signature.key.raw), "")
        return f"signed by key {signature.key.id}{f' ({name})' if name else ''}, trusted here"
    if not signature.verified:
        return f"signed by key {signature.key.id}; {reason}"
    return f"signed by key {signature.key.id} ({signature.key.text}), not trusted here"
