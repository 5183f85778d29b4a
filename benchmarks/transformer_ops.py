"""GELU, softmax and LayerNorm in integers: the accelerator's methods measured against float on the suite
transformers' own activations (issue 53; docs/transformers.md).

    python benchmarks/transformer_ops.py [--json benchmarks/transformer_ops.json] [--tests 4] [--calib 16]
        [--deit PRESET ...]

For ``vit_tiny`` and ``bert_tiny`` of ``vdla.zoo.suite``, the float graph is evaluated on seeded calibration
and test inputs (images, token ids with padded tails) and every gelu, softmax and layer_norm input is kept. Each
input is quantized to int8 per tensor at the calibration's 99.99th percentile of ``|x|`` (vdla's default
threshold), as the accelerator would hold it after the producing layer's epilogue, and each candidate method
computes the operator in integers from those int8 values only. The result is compared with the float
operator on the float input (float64): largest and RMS error and cosine, per operator node; for softmax in
units of the int8 output step 1/127 (probabilities), for LayerNorm in units of the output's own step
(its float range over 127).

``--deit PRESET``: DeiT-Tiny at 224 (``vdla.zoo.models.deit_tiny``, seeded weights, 12 layers) compiled with
vdla's calibration for each preset (a name or a JSON config file) and run on the simulator on ``--tests``
images (``suite_images``): MACs, the accelerator's share, CPU steps, cycles and their ratio to the MAC bound,
the cosine of the logits with onnxruntime's float model, and the CPU operators left.

GELU (``table``): the 256-entry int8 table the compiler puts in the dense layer's epilogue,
``round(gelu(s q) / s_out)`` clamped to int8, the output scale the calibrated one of GELU's output.

Softmax methods (int8 scores ``q`` at scale ``s``, output int8 ``round(127 p)``):

* ``ibert``: I-BERT's ``i-exp`` (Kim et al. 2021): the row maximum subtracted, ``exp`` of the int32 difference
  by ``z = floor(-x / ln2)`` and the second-order polynomial on ``[-ln2, 0]``, the int32 sum, one division;
* ``table_max``: the row maximum subtracted, ``exp`` of the difference (clamped to int8) by a 256-entry table
  of 15-bit values (two int8 tables on the accelerator: high and low byte), the sum, one division;
* ``table_nomax``: no row maximum (the accelerator has no cross-lane maximum): ``exp(s (q - 127))`` as a
  15-bit table, ``q = -128`` (a masked or clipped score) exactly 0, the sum, one division.

LayerNorm methods (int8 ``q`` at scale ``s``; the statistics exact in int32; output as float to isolate the
normalization's own error):

* ``ibert``: I-BERT's integer square root of the variance (Newton in integers from ``2^ceil(bits/2)``) and
  the integer division ``(q - mean) * 2^F / std``;
* ``newton_rsqrt``: ``1 / sqrt(var)`` by Newton's iteration in fixed point from a constant seed after
  normalizing by the leading one (what ALU MUL with its shift computes), four iterations, then a multiply;
* ``accelerator``: the compiled program's arithmetic (``vdla.graph.oracle.layer_norm_int``, gamma 1 and beta
  0), its int8 output at the normalized value's step.

``--attention``: every attention head of both models compiled (``vdla.compiler.attention``) and checked on the
test inputs: Q, K, V (and BERT's key mask) captured at the products around each softmax, quantized per tensor
at the calibrated threshold, the scores and the output too; the integer head (``oracle.attention_int``, which
the compiled program equals bit for bit) against float attention (softmax in float64) on the dequantized int8
inputs and against the model's own float output, in output steps; cycles of one head on the simulator of
``pynq-z2`` and ``pynq-full`` (the run checked against the oracle).

``--ln PRESET ...``: each LayerNorm compiled (``vdla.compiler.layer_norm``, the node's gamma and beta) and run
on one sample's (tokens, features) rows on the simulator of each preset (a name or a JSON config): ``cycles``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from vdla.compiler.attention import AttentionSpec, compile_attention
from vdla.compiler.layer_norm import LayerNormSpec, compile_layer_norm
from vdla.config import load_config
from vdla.frontend.onnx import import_onnx
from vdla.frontend.reference import reference_session
from vdla.graph import oracle
from vdla.graph.attention import IntAttention
from vdla.graph.interp import evaluate
from vdla.graph.layernorm import IntLayerNorm
from vdla.graph.passes import simplify
from vdla.model import Module
from vdla.model.pipeline import CompileOptions, compile_model
from vdla.runtime.device import Device
from vdla.zoo.models import cosine, deit_tiny
from vdla.zoo.random_programs import pynq_full
from vdla.zoo.suite import SUITE, suite_images

PERCENTILE = 99.99
EXP_BITS = 15  # the table's exp values: 15 bits, two int8 tables (high and low byte)
LN2 = math.log(2.0)
MASKED = 1e3  # a score below -MASKED is an additive mask's (the exporters' -10000, -inf or float32's lowest)


def int8(x: np.ndarray, scale: float) -> np.ndarray:
    return np.clip(np.round(x / scale), -128, 127).astype(np.int64)


def threshold(values: list[np.ndarray]) -> float:
    return float(np.percentile(np.abs(np.concatenate([v.ravel() for v in values])), PERCENTILE))


# ---------------------------------------------------------------------------------------------------------
# GELU


def float_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_errors(x: np.ndarray, s: float, out: float) -> dict:
    table = np.clip(np.round(float_gelu(np.arange(-128, 128) * s) / out), -128, 127)
    got = table[int8(x, s) + 128] * out
    return errors(got, float_gelu(x.astype(np.float64)), out)


# ---------------------------------------------------------------------------------------------------------
# softmax


def ibert_exp(d: np.ndarray, s: float) -> tuple[np.ndarray, float]:
    """I-BERT's i-exp of ``s * d`` (``d <= 0`` int): integer values and their scale."""
    x0 = int(math.floor(-LN2 / s))  # -ln2 in steps of s
    z = np.floor_divide(d, x0)  # how many ln2 below 0
    p = d - z * x0  # in (x0, 0]
    a, b, c = 0.3585, 1.353, 0.344  # exp(x) ~ a (x + b)^2 + c on [-ln2, 0]
    qb, qc = int(math.floor(b / s)), int(math.floor(c / (a * s * s)))
    poly = (p + qb) ** 2 + qc  # scale a s^2
    return np.right_shift(poly, np.minimum(z, 62)), a * s * s


def softmax_int(q: np.ndarray, s: float, method: str, out: float) -> np.ndarray:
    """int8 probabilities ``round(p / out)`` (clamped to 127) of int8 scores ``q`` (last axis) by ``method``;
    ``q = -128`` is a masked (or clipped) score, its exp exactly 0."""
    top = (1 << EXP_BITS) - 1
    if method == "ibert":
        e, _ = ibert_exp(q - q.max(axis=-1, keepdims=True), s)
    elif method == "table_max":
        d = np.maximum(q - q.max(axis=-1, keepdims=True), -128)
        e = np.round(top * np.exp(s * d)).astype(np.int64)
    else:  # table_nomax
        e = np.round(top * np.exp(s * (q - 127))).astype(np.int64)
    e = np.where(q == -128, 0, e)
    total = np.maximum(e.sum(axis=-1, keepdims=True), 1)
    k = round(1 / out)  # 1 / out, an integer where out is 1/k (the calibrated output scale, rounded so)
    return np.minimum((e * k + total // 2) // total, 127)  # one integer division, rounded


def float_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_errors(x: np.ndarray, s: float, out: float, method: str) -> dict:
    """Against float softmax; a masked score (below -MASKED) becomes the int8 code -128."""
    q = np.where(x < -MASKED, -128, int8(x, s))
    got = softmax_int(q, s, method, out) * out
    return errors(got, float_softmax(x), out)


# ---------------------------------------------------------------------------------------------------------
# LayerNorm


def isqrt_newton(v: np.ndarray) -> np.ndarray:
    """floor(sqrt(v)) of non-negative int64 ``v`` by Newton's iteration in integers (I-BERT's)."""
    x = np.left_shift(1, (np.ceil(np.log2(np.maximum(v, 1) + 1) / 2)).astype(np.int64))
    for _ in range(32):
        y = (x + v // np.maximum(x, 1)) // 2
        x = np.where(y < x, y, x)
    return x


def rsqrt_newton(v: np.ndarray, iters: int = 4, frac: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """``1 / sqrt(v)`` of positive int64 ``v`` in fixed point with ``frac`` fractional bits: ``v = m 4^k``,
    ``m`` in [1, 4) (``k`` from the leading one), the seed 0.7 (within 40% of ``1/sqrt(m)`` in (0.5, 1]), then
    Newton's ``y <- y (3 - m y^2) / 2``, each product rounded to ``frac`` bits (ALU MUL with its shift):
    relative error 0.4 -> 0.24 -> 0.09 -> 0.011 -> 2e-4. Returns (y, k): ``1/sqrt(v) ~ y 2^-frac 2^-k``."""
    k = (np.floor(np.log2(np.maximum(v, 1))) // 2).astype(np.int64)
    m = np.left_shift(v, frac) >> (2 * k)  # m 2^frac, m in [1, 4)
    y = np.full_like(v, int(0.7 * (1 << frac)))
    one = 1 << frac
    for _ in range(iters):
        y2 = (y * y + (one >> 1)) >> frac
        t = (3 * one - ((m * y2 + (one >> 1)) >> frac)) >> 1
        y = (y * t + (one >> 1)) >> frac
    return y, k


def layer_norm_int(q: np.ndarray, method: str, frac: int = 15) -> np.ndarray:
    """``(q - mean) / std`` over the last axis of int8 ``q`` in integers, as float (scale 2^-frac)."""
    n = q.shape[-1]
    total = q.sum(axis=-1, keepdims=True)
    dev = q * n - total  # n (q - mean): exact
    var = (dev * dev).sum(axis=-1, keepdims=True) // n  # n^2 var(q) * n / n
    if method == "ibert":
        std = isqrt_newton(var)  # n std(q)
        y = (dev << frac) // np.maximum(std, 1)
    else:
        r, k = rsqrt_newton(var)  # 1/(n std) ~ r 2^-30 2^-k
        y = (dev * r) >> (30 - frac + k)
    return y / float(1 << frac)


def layer_norm_errors(x: np.ndarray, s: float, eps: float, method: str) -> dict:
    v = x.astype(np.float64)
    want = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps)
    step = float(np.abs(want).max()) / 127
    if method == "accelerator":  # the compiled program's arithmetic, int8 out at ``step`` (gamma 1, beta 0)
        n = x.shape[-1]
        p = IntLayerNorm.of(n, s, step, np.ones(n), np.zeros(n), eps)
        return errors(oracle.layer_norm_int(int8(x, s).astype(np.int8), p) * step, want, step)
    return errors(layer_norm_int(int8(x, s), method), want, step)


def layer_norm_cycles(node, g, x: np.ndarray, s: float, eps: float, presets: list[str]) -> dict:
    """Cycles of the compiled LayerNorm (``vdla.compiler.layer_norm``) over one sample's rows (tokens, features)
    with the node's gamma and beta, on each preset (the simulator); its output scale that of the float output."""
    n, tokens = x.shape[-1], x.shape[-2]
    gamma, beta = (g.params[i] for i in node.inputs[1:3])
    v = x.astype(np.float64)
    out = (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps) * gamma + beta
    spec = LayerNormSpec(tokens, IntLayerNorm.of(n, s, float(np.abs(out).max()) / 127, gamma, beta, eps))
    q = int8(x.reshape(-1, tokens, n)[0], s).astype(np.int8)
    cycles = {}
    for preset in presets:
        layer = compile_layer_norm(spec, preset)
        cycles[load_config(preset).name] = int(layer.run(Device(layer.lowering.cfg), q).counters.cycles)
    return {"tokens": tokens, "cycles": cycles}


def errors(got: np.ndarray, want: np.ndarray, step: float) -> dict:
    err = (got - want).ravel()
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    return {
        "max_steps": round(float(np.abs(err).max() / step), 3),
        "rms_steps": round(float(np.sqrt(np.mean(err**2)) / step), 4),
        "cosine": round(cos, 6),
    }


# ---------------------------------------------------------------------------------------------------------


def activations(name: str, calib: int, tests: int):
    """The float graph, its gelu, softmax and layer_norm nodes and their inputs on the calibration and test
    inputs."""
    m = SUITE[name]
    g = simplify(import_onnx(m.load(), m.input_shapes()))
    nodes = {n.output: n for n in g.nodes if n.op in ("gelu", "softmax", "layer_norm")}

    def run(feeds: list[dict]) -> dict[str, list[np.ndarray]]:
        kept: dict[str, list[np.ndarray]] = {k: [] for k in nodes}
        for f in feeds:
            vals = evaluate(g, {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in f.items()}, keep=True)
            for k, n in nodes.items():
                kept[k].append(vals[n.inputs[0]])
        return kept

    samples = m.samples(calib, 1)
    feeds = [{k: v[i : i + 1] for k, v in samples.items()} for i in range(calib)]
    return g, nodes, run(feeds), run(m.feeds(tests, 7))


def measure(name: str, calib: int, tests: int, presets: list[str]) -> list[dict]:
    g, nodes, cal, test = activations(name, calib, tests)
    records = []
    for k, n in nodes.items():
        x = np.concatenate(test[k])
        if n.op == "softmax":  # scales of the unmasked scores and of the probabilities (1/k: an integer k)
            s = threshold([v[v > -MASKED] for v in cal[k]]) / 127
            out = 1 / math.floor(127 / threshold([float_softmax(v) for v in cal[k]]))
            methods = {m: softmax_errors(x, s, out, m) for m in ("ibert", "table_max", "table_nomax")}
            q = np.where(x < -MASKED, -128, int8(x, s))
            # table_nomax's headroom: the smallest row maximum of its 15-bit exps (precision left at the top)
            methods["table_nomax"]["least_row_max_exp"] = int(np.exp(s * (q.max(axis=-1) - 127)).min() * 32767)
        elif n.op == "gelu":
            s = threshold(cal[k]) / 127
            methods = {"table": gelu_errors(x, s, threshold([float_gelu(v) for v in cal[k]]) / 127)}
        else:
            s = threshold(cal[k]) / 127
            eps = float(n.attrs["epsilon"])
            methods = {m: layer_norm_errors(x, s, eps, m) for m in ("ibert", "newton_rsqrt", "accelerator")}
            if presets:
                methods["compiled"] = layer_norm_cycles(n, g, np.stack(test[k]), s, eps, presets)  # one sample's
        records.append({"model": name, "node": k, "op": n.op, "scale": s, "row": int(x.shape[-1]), **methods})
    return records


# ---------------------------------------------------------------------------------------------------------
# attention


def attention_tensors(name: str, calib: int, tests: int) -> tuple[dict, dict]:
    """Per softmax node: the float Q, K, V, key mask (0 or -10000 added to the scores; zeros without one), scores
    and output, (samples, heads, tokens, channels), on the calibration and the test inputs."""
    m = SUITE[name]
    g = simplify(import_onnx(m.load(), m.input_shapes()))
    prod = {n.output: n for n in g.nodes}
    heads = {}
    for n in g.nodes:
        if n.op == "matmul" and n.inputs[0] in prod and prod[n.inputs[0]].op == "softmax":
            sm = prod[n.inputs[0]]
            pre = prod[sm.inputs[0]]
            mask = pre.inputs[1] if pre.op == "add" else None
            qk = prod[pre.inputs[0]] if pre.op == "add" else pre
            qk = prod[qk.inputs[0]] if qk.op == "mul" else qk
            heads[sm.output] = (qk.inputs[0], qk.inputs[1], n.inputs[1], mask, sm.inputs[0], n.output)

    def run(feeds: list[dict]) -> dict[str, list[np.ndarray]]:
        kept: dict[str, list] = {k: [] for k in heads}
        for f in feeds:
            vals = evaluate(g, {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in f.items()}, keep=True)
            for k, (q, kt, v, mask, scores, out) in heads.items():
                mk = vals[mask][..., 0, :] if mask else np.zeros(1, np.float32)  # (samples, 1, keys)
                kv = np.swapaxes(vals[kt], -1, -2)
                kept[k].append((vals[q], kv, vals[v], np.broadcast_to(mk, kv.shape[:-1]), vals[scores], vals[out]))
        return {k: [np.concatenate(x) for x in zip(*v)] for k, v in kept.items()}

    samples = m.samples(calib, 1)
    return run([{k: v[i : i + 1] for k, v in samples.items()} for i in range(calib)]), run(m.feeds(tests, 7))


def float_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """softmax(q k^T / sqrt(d) + mask) v in float64, masked keys excluded."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    return float_softmax(np.where(keep[..., None, :], s, -np.inf)) @ v


def attention_records(name: str, calib: int, tests: int) -> list[dict]:
    cal, test = attention_tensors(name, calib, tests)
    records = []
    for node, (q, k, v, mask, _, out) in test.items():
        cq, ck, cv, cm, cs, co = cal[node]
        sq, sk, sv, so = (threshold([x]) / 127 for x in (cq, ck, cv, co))
        ss = threshold([cs[cm[..., None, :].repeat(cs.shape[-2], -2) > -MASKED]]) / 127
        d, tokens = q.shape[-1], q.shape[-2]
        record = {"model": name, "node": node, "tokens": tokens, "d": d, "score_scale": ss}
        try:
            p = IntAttention.of(d, sq, sk, sv, ss, so)
        except Exception as e:  # noqa: BLE001 - the refusal is the record
            records.append({**record, "refused": str(e)})
            continue
        qi, ki, vi = (int8(x, s).astype(np.int8) for x, s in ((q, sq), (k, sk), (v, sv)))
        keep = mask > -MASKED
        got = np.stack([np.stack([oracle.attention_int(qi[n, h], ki[n, h], vi[n, h], p, keep[n, h])
                                  for h in range(q.shape[1])]) for n in range(q.shape[0])])  # fmt: skip
        dequantized = float_attention(qi * sq, ki * sk, vi * sv, keep)
        record["vs_float_on_int8_inputs"] = errors(got * so, dequantized, so)
        record["vs_model_float"] = errors(got * so, out.astype(np.float64), so)
        record["least_row_max_exp"] = least_row_max_exp(qi, ki, keep, p)
        record["cycles"] = attention_cycles(p, tokens, qi[0, 0], ki[0, 0], vi[0, 0], keep[0, 0])
        records.append(record)
    return records


def least_row_max_exp(q: np.ndarray, k: np.ndarray, keep: np.ndarray, p: IntAttention) -> int:
    """The smallest row maximum of the 15-bit exps (the precision left at the top of a row)."""
    acc = np.einsum("nhtc,nhuc->nhtu", q.astype(np.int64), k.astype(np.int64))
    s = np.clip(oracle.mul_shift(acc, p.score_multiplier, p.score_shift), -128, 127)
    e = np.asarray(p.exp)[np.where(keep[..., None, :], s, -128) + 128]
    return int(e.max(axis=-1).min())


def attention_cycles(p: IntAttention, tokens: int, q, k, v, keep) -> dict:
    """Cycles of one compiled head (run-time mask) on pynq-z2 and pynq-full, its output checked bit for bit."""
    x = np.concatenate([q, k, v], axis=1)
    spec = AttentionSpec(tokens, p, runtime_mask=True)
    cycles = {}
    for cfg in (load_config("pynq-z2"), pynq_full()):
        layer = compile_attention(spec, cfg)
        run = layer.run(Device(cfg), x, keep)
        if not np.array_equal(run.out, oracle.attention_int(q, k, v, p, keep)):
            raise AssertionError(f"the compiled head differs from oracle.attention_int on {cfg.name}")
        cycles[cfg.name] = int(run.counters.cycles)
    return cycles


def deit(preset: str, calib: int, tests: int) -> dict:
    """DeiT-Tiny at 224 on ``preset`` (module docstring)."""
    model, shape = deit_tiny(), {"image": (1, 3, 224, 224)}
    options = CompileOptions(config=preset, input_shapes=shape)
    art, _ = compile_model(model, {"image": suite_images(calib, 224, 1)}, options)
    module, session = Module(art, "sim"), reference_session(model)
    cosines = []
    for x in suite_images(tests, 224, 7):
        cosines.append(cosine(module.run(x[None]), session.run(None, {"image": x[None]})[0]))
    run, cfg = module.last_report, art.config
    bound = art.total_macs / cfg.macs_per_cycle
    return {
        "model": "deit_tiny",
        "preset": load_config(preset).name,
        "macs": int(art.total_macs),
        "accel_mac_share": art.accel_macs / art.total_macs,
        "cpu_steps": sum(s.kind == "cpu" for s in art.steps),
        "accel_cycles": int(run.accel_cycles),
        "ratio": run.accel_cycles / bound,
        "cosine_min": min(cosines),
        "cpu_ops": sorted({n.op for s in art.steps if s.kind == "cpu" for n in s.graph.nodes}),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--tests", type=int, default=4)
    ap.add_argument("--calib", type=int, default=16)
    ap.add_argument("--deit", nargs="*", default=[], help="presets to run DeiT-Tiny at 224 on")
    ap.add_argument("--ln", nargs="*", default=[], help="presets to time the compiled LayerNorms on")
    ap.add_argument("--attention", action="store_true", help="the compiled attention heads: error and cycles")
    args = ap.parse_args()
    if args.attention:
        records = [r for name in ("vit_tiny", "bert_tiny") for r in attention_records(name, args.calib, args.tests)]
        for r in records:
            print(json.dumps(r))
        if args.json:
            args.json.write_text(json.dumps(records, indent=2) + "\n")
        return 0
    records = [r for name in ("vit_tiny", "bert_tiny") for r in measure(name, args.calib, args.tests, args.ln)]
    for r in records:
        figs = {k: v for k, v in r.items() if isinstance(v, dict)}
        print(r["model"], r["node"], r["op"], f"row {r['row']}", json.dumps(figs))
    for preset in args.deit:
        records.append(deit(preset, args.calib, args.tests))
        print(json.dumps(records[-1]))
    if args.json:
        args.json.write_text(json.dumps(records, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
