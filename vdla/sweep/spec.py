"""The sweep's specification: a TOML file (``vdla sweep SPEC.toml``) parsed into a frozen :class:`SweepSpec`.

Everything is checked before any work starts, and each refusal names its key (``space.block_in[2]``,
``models[1].calib``, ...): an unknown key or parameter, a value of the wrong type, an empty range, an unknown
preset, suite model or measurement, a missing file. docs/sweep.md describes every key::

    base = "pynq-z2"                        # the preset every point starts from
    models = ["resnet18", "mobilenet_v2", {onnx = "net.onnx", calib = "calib.npz"}]
    measure = ["sim", "rtl", "fit"]         # sim always; rtl and fit on request
    calib_samples = 8                       # seeded calibration images of the built-in models

    [space]                                 # the parameters varied: a list of values, or a range
    block = [8, 16]                         # block_in = block_out
    wgt_buff_bytes = {min = 32768, max = 131072, scale = "pow2"}
    clock_mhz = {min = 100, max = 150, step = 25}

    [search]
    method = "grid"                         # or "random", "nsga2"
    samples = 16                            # random, nsga2: how many points
    seed = 0

    [run]
    workers = 2                             # default: one per core
    retries = 2
    timeout = 1800                          # seconds a point may take (default: none)
    ray = "auto"                            # or an address; default: a local process pool
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from vdla.config import PRESET_ALIASES, URAM_BUFFER_NAMES, ConfigError, HwConfig, load_config, preset_names
from vdla.errors import VdlaError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the cli extra installs tomli on Python 3.10
    import tomli as tomllib

# the parameters a spec may vary: HwConfig fields (``block`` sets block_in and block_out together, as the model
# compiler needs square blocks) -> the type of their values
PARAMETERS: dict[str, type] = {
    "batch": int,
    "block": int,
    "block_in": int,
    "block_out": int,
    "inp_buff_bytes": int,
    "wgt_buff_bytes": int,
    "acc_buff_bytes": int,
    "uop_buff_bytes": int,
    "bus_width_bits": int,
    "clock_mhz": float,
    "depthwise_mode": bool,
    "out_multiplier": bool,
    "alu_lanes": int,
    "src_out": bool,
    "uram_buffers": tuple,
}
MEASURES = ("sim", "rtl", "fit")
METHODS = ("grid", "random", "nsga2")
BUILTIN_MODELS = ("resnet18",)  # besides the suite's (vdla.zoo.suite.SUITE)
CALIBRATIONS = ("minmax", "percentile", "entropy")
TOP_KEYS = ("base", "models", "measure", "calib_samples", "space", "search", "run")
MAX_RANGE = 10_000  # values a range may expand to


class SpecError(VdlaError, ValueError):
    """A sweep specification that cannot run, naming the key that is wrong."""


@dataclass(frozen=True)
class ModelSpec:
    """One model of the sweep: a built-in (``resnet18``), a suite model, or an ONNX file with its calibration
    (an .npz of float samples per input; none for a QDQ model, which keeps its own scales)."""

    name: str
    onnx: str | None = None  # path; None for a built-in or suite model
    calib: str | None = None  # .npz path (ONNX models)
    calibration: str = ""  # the calibration method ("" the model's default: percentile, entropy for resnet18)
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep: the base preset, the space (parameter -> its values, in the spec's order), the models,
    what to measure, how to search and how to run. ``source`` is the file it came from (relative paths in it
    are read from its directory)."""

    base: str
    space: tuple[tuple[str, tuple[Any, ...]], ...]
    models: tuple[ModelSpec, ...]
    measure: tuple[str, ...] = ("sim",)
    method: str = "grid"
    samples: int | None = None
    seed: int = 0
    workers: int | None = None
    retries: int = 2
    timeout: float | None = None
    ray: str | None = None
    calib_samples: int = 8
    source: str = field(default="", compare=False)

    @property
    def parameters(self) -> dict[str, tuple[Any, ...]]:
        return dict(self.space)

    def base_config(self) -> HwConfig:
        return load_config(self.base)

    def replaced(self, **changes: Any) -> SweepSpec:
        """A copy with some fields changed (the command line's overrides), validated again."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update({k: v for k, v in changes.items() if v is not None})
        spec = SweepSpec(**d)
        _check_run(spec)
        return spec


def load_spec(path: str | Path) -> SweepSpec:
    """Parse and validate a spec file (SpecError naming the key on anything wrong)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise SpecError(f"cannot read the sweep spec {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    return spec_from_dict(data, path.parent, str(path))


def spec_from_dict(data: dict, root: str | Path = ".", source: str = "") -> SweepSpec:
    """A validated SweepSpec from a parsed TOML document; relative paths are taken from ``root``."""
    root = Path(root)
    _no_unknown(data, TOP_KEYS, "")
    base = _typed(data.get("base", "pynq-z2"), str, "base")
    if base not in preset_names() and base not in PRESET_ALIASES:
        base = str(root / base)  # a JSON file of the same shape as a preset
    try:
        load_config(base)
    except ConfigError as e:
        raise SpecError(f"base: {e}") from None
    models = _models(data.get("models"), root)
    measure = _typed(data.get("measure", ["sim"]), list, "measure")
    for i, m in enumerate(measure):
        if m not in MEASURES:
            raise SpecError(f"measure[{i}]: {m!r} is not one of {', '.join(MEASURES)}")
    measure = tuple(m for m in MEASURES if m == "sim" or m in measure)  # sim always, in a fixed order
    calib_samples = _typed(data.get("calib_samples", 8), int, "calib_samples")
    if calib_samples < 1:
        raise SpecError(f"calib_samples: must be >= 1, got {calib_samples}")
    space = _space(_typed(data.get("space", {}), dict, "space"))
    search = _typed(data.get("search", {}), dict, "search")
    _no_unknown(search, ("method", "samples", "seed"), "search.")
    run = _typed(data.get("run", {}), dict, "run")
    _no_unknown(run, ("workers", "retries", "timeout", "ray"), "run.")
    spec = SweepSpec(
        base=base,
        space=space,
        models=models,
        measure=measure,
        method=_typed(search.get("method", "grid"), str, "search.method"),
        samples=_typed(search.get("samples"), int, "search.samples", optional=True),
        seed=_typed(search.get("seed", 0), int, "search.seed"),
        workers=_typed(run.get("workers"), int, "run.workers", optional=True),
        retries=_typed(run.get("retries", 2), int, "run.retries"),
        timeout=_typed(run.get("timeout"), float, "run.timeout", optional=True),
        ray=_typed(run.get("ray"), str, "run.ray", optional=True),
        calib_samples=calib_samples,
        source=source,
    )
    _check_run(spec)
    return spec


def _check_run(spec: SweepSpec) -> None:
    """The search and run settings, as given or as overridden on the command line."""
    if spec.method not in METHODS:
        raise SpecError(f"search.method: {spec.method!r} is not one of {', '.join(METHODS)}")
    if spec.samples is not None and spec.samples < 1:
        raise SpecError(f"search.samples: must be >= 1, got {spec.samples}")
    if spec.method in ("random", "nsga2") and spec.samples is None:
        raise SpecError(f"search.samples: the {spec.method} search needs a number of points (samples)")
    if spec.workers is not None and spec.workers < 1:
        raise SpecError(f"run.workers: must be >= 1, got {spec.workers}")
    if spec.retries < 0:
        raise SpecError(f"run.retries: must be >= 0, got {spec.retries}")
    if spec.timeout is not None and spec.timeout <= 0:
        raise SpecError(f"run.timeout: must be > 0 seconds, got {spec.timeout}")


_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "a list", dict: "a table"}


def _typed(v: Any, t: type, key: str, optional: bool = False) -> Any:
    """``v`` when it has type ``t`` (a bool is not an int; an int is a float), else SpecError naming ``key``."""
    if v is None and optional:
        return None
    ok = type(v) is t or (t is float and type(v) is int) or (t is list and isinstance(v, list))
    if not ok:
        raise SpecError(f"{key}: expected {_WORDS[t]}, got {v!r}")
    return float(v) if t is float else v


def _no_unknown(d: dict, known: tuple[str, ...], prefix: str) -> None:
    unknown = [k for k in d if k not in known]
    if unknown:
        raise SpecError(f"{prefix}{unknown[0]}: unknown key (known: {', '.join(known)})")


def _models(raw: Any, root: Path) -> tuple[ModelSpec, ...]:
    from vdla.zoo.suite import SUITE

    if raw is None:
        raise SpecError("models: missing (a list of suite names, 'resnet18', or {onnx = PATH, calib = NPZ})")
    raw = _typed(raw, list, "models")
    if not raw:
        raise SpecError("models: empty: name at least one model")
    out = []
    for i, m in enumerate(raw):
        key = f"models[{i}]"
        if isinstance(m, str):
            if m not in SUITE and m not in BUILTIN_MODELS:
                known = ", ".join([*BUILTIN_MODELS, *SUITE])
                raise SpecError(f"{key}: no model {m!r} (built in: {known}; or {{onnx = PATH, calib = NPZ}})")
            out.append(ModelSpec(m))
            continue
        m = _typed(m, dict, key)
        _no_unknown(m, ("onnx", "calib", "name", "calibration", "input_shapes"), f"{key}.")
        if "onnx" not in m:
            raise SpecError(f"{key}.onnx: missing (the model's ONNX file)")
        onnx = root / _typed(m["onnx"], str, f"{key}.onnx")
        if not onnx.is_file():
            raise SpecError(f"{key}.onnx: no file {onnx}")
        calib = _typed(m.get("calib"), str, f"{key}.calib", optional=True)
        if calib is not None and not (root / calib).is_file():
            raise SpecError(f"{key}.calib: no file {root / calib}")
        calibration = _typed(m.get("calibration", ""), str, f"{key}.calibration")
        if calibration and calibration not in CALIBRATIONS:
            raise SpecError(f"{key}.calibration: {calibration!r} is not one of {', '.join(CALIBRATIONS)}")
        shapes = _typed(m.get("input_shapes", {}), dict, f"{key}.input_shapes")
        for name, dims in shapes.items():
            if not isinstance(dims, list) or not dims or not all(type(d) is int and d > 0 for d in dims):
                raise SpecError(f"{key}.input_shapes.{name}: expected a list of positive integers, got {dims!r}")
        out.append(
            ModelSpec(
                _typed(m.get("name", onnx.stem), str, f"{key}.name"),
                str(onnx),
                None if calib is None else str(root / calib),
                calibration,
                tuple((k, tuple(v)) for k, v in shapes.items()),
            )
        )
    names = [m.name for m in out]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise SpecError(f"models[{i}]: the name {n!r} is used twice (give one a name = ...)")
    return tuple(out)


def _space(raw: dict) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    out = []
    for name, values in raw.items():
        key = f"space.{name}"
        if name not in PARAMETERS:
            raise SpecError(f"{key}: unknown parameter (the parameters: {', '.join(PARAMETERS)})")
        if isinstance(values, dict):
            values = _range(values, PARAMETERS[name], key)
        values = _typed(values, list, key)
        if not values:
            raise SpecError(f"{key}: empty: give at least one value")
        checked = tuple(_value(v, PARAMETERS[name], f"{key}[{i}]") for i, v in enumerate(values))
        if len(set(checked)) != len(checked):
            raise SpecError(f"{key}: a value is listed twice: {list(values)}")
        out.append((name, checked))
    if "block" in raw and ("block_in" in raw or "block_out" in raw):
        raise SpecError("space.block: sets block_in and block_out; do not vary them as well")
    return tuple(out)


def _value(v: Any, t: type, key: str) -> Any:
    if t is tuple:  # uram_buffers: a list of buffer names
        if not isinstance(v, list) or not all(isinstance(b, str) and b in URAM_BUFFER_NAMES for b in v):
            raise SpecError(f"{key}: expected a list of buffer names of {', '.join(URAM_BUFFER_NAMES)}, got {v!r}")
        return tuple(v)
    return _typed(v, t, key)


def _range(r: dict, t: type, key: str) -> list:
    """``{min, max, step}`` (every step from min to max) or ``{min, max, scale = "pow2"}`` (the powers of two)."""
    if t not in (int, float):
        raise SpecError(f"{key}: a range is for numbers; list the values instead")
    _no_unknown(r, ("min", "max", "step", "scale"), f"{key}.")
    for k in ("min", "max"):
        if k not in r:
            raise SpecError(f"{key}.{k}: missing (a range is {{min, max, step}} or {{min, max, scale = 'pow2'}})")
    lo, hi = _typed(r["min"], t, f"{key}.min"), _typed(r["max"], t, f"{key}.max")
    scale = _typed(r.get("scale", "linear"), str, f"{key}.scale")
    if scale == "pow2":
        if "step" in r:
            raise SpecError(f"{key}.step: not with scale = 'pow2' (each value doubles)")
        values, v = [], 1
        while v <= hi:
            if v >= lo:
                values.append(t(v))
            v *= 2
    elif scale == "linear":
        if "step" not in r:
            raise SpecError(f"{key}.step: missing (or scale = 'pow2')")
        step = _typed(r["step"], t, f"{key}.step")
        if step <= 0:
            raise SpecError(f"{key}.step: must be > 0, got {step}")
        n = int((hi - lo) // step) + 1 if hi >= lo else 0
        if n > MAX_RANGE:
            raise SpecError(f"{key}: {n} values, more than {MAX_RANGE}")
        values = [t(lo + i * step) for i in range(n)]
    else:
        raise SpecError(f"{key}.scale: {scale!r} is not 'linear' or 'pow2'")
    if not values:
        raise SpecError(f"{key}: empty range (min {lo}, max {hi})")
    return values
