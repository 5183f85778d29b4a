"""CPU kernel of the recurrent cells (ONNX's RNN, GRU and LSTM after their input projection), registered with
:func:`vdla.cpu_fallback.kernels.emit` (importing this module registers it; :mod:`vdla.cpu_fallback.jit` does).

The kernel runs :func:`vdla.graph.oracle.recurrence`: for each direction (unrolled: its order and activations
are compile-time constants) and batch item, the state lives in the scratch buffer, the output rows are zeroed,
then a loop over the item's length (read at run time, clamped to [0, T]) takes one time step each: the gate
pre-activations ``x + Rb + R h`` (dot products along contiguous rows of R, reassociated so that they vectorize),
then the cell's elementwise update, each activation emitted from its steps' :class:`~vdla.graph.ew.EwDef`
expressions (the oracle evaluates the same ones). Scratch: h, c, the gates and GRU's ``r * h``, (G + 3) * H
floats.
"""

from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from vdla.cpu_fallback.codegen import REASSOC, KernelBuilder
from vdla.cpu_fallback.ew_emit import emit_step
from vdla.cpu_fallback.kernels import register_emitter, scratch_elements
from vdla.cpu_fallback.lltypes import F32, I64, i64
from vdla.cpu_fallback.specs import RecurrenceSpec
from vdla.graph.ew import EwStep
from vdla.graph.oracle import RNN_ACTIVATIONS, RNN_GATES


@scratch_elements.register
def _(spec: RecurrenceSpec) -> int:
    return (RNN_GATES[spec.attrs.cell] + 3) * spec.inputs[1].shape[2]


@dataclass(frozen=True)
class _Step:
    """What one time step of direction ``d`` of batch item ``bi`` at time ``t`` reads and writes: offsets of
    the scratch buffer's slots (h, c, gates ``a``, ``rh``) and of the inputs' rows."""

    spec: RecurrenceSpec
    d: int
    bi: ir.Value
    t: ir.Value

    @property
    def n(self) -> int:
        return self.spec.inputs[1].shape[2]

    @property
    def gh(self) -> int:
        return self.spec.inputs[1].shape[1]

    def slot(self, name: str) -> int:
        """Scratch offset of ``h``, ``c``, ``rh`` (H each) or the gates ``a`` (G*H)."""
        n = self.n
        return {"h": 0, "c": n, "rh": 2 * n, "a": 3 * n}[name]


def _activate(kb: KernelBuilder, steps: tuple[EwStep, ...], v: ir.Value) -> ir.Value:
    for step in steps:
        v = emit_step(kb, step, v, "float32", "float32", [o.value for o in step.operands])
    return v


def _scr(kb: KernelBuilder, index: ir.Value | int) -> ir.Value:
    return kb.load("float32", kb.scratch, index)


def _set(kb: KernelBuilder, v: ir.Value, index: ir.Value | int) -> None:
    kb.store(v, "float32", kb.scratch, index)


def _off(kb: KernelBuilder, base: int, k: ir.Value) -> ir.Value:
    return kb.b.add(i64(base), k)


def _x_row(kb: KernelBuilder, st: _Step) -> ir.Value:
    """Offset of ``gates[t, bi, d, 0]``."""
    t_n, b_n, d_n, gh = st.spec.inputs[0].shape
    return kb.linear([st.t, st.bi], [b_n * d_n * gh, d_n * gh], st.d * gh)


def _matvec(kb: KernelBuilder, st: _Step, j0: int, j1: int, vec: str, with_x: bool) -> None:
    """``a[j] = (x[j] if with_x) + Rb[d, j] + sum_k R[d, j, k] * vec[k]`` for the gate rows j0..j1."""
    b = kb.b
    r, rb = kb.inputs[1], kb.inputs[2]
    n, gh = st.n, st.gh
    acc = kb.alloca("float32", 1)
    x_row = _x_row(kb, st)
    with kb.loop(j0, j1) as j:
        first = kb.load("float32", rb, b.add(i64(st.d * gh), j))
        if with_x:
            first = b.fadd(kb.load("float32", kb.inputs[0], b.add(x_row, j)), first)
        b.store(ir.Constant(F32, 0.0), acc)
        row = b.mul(b.add(i64(st.d * gh), j), i64(n))
        with kb.loop(0, n) as k:
            p = b.fmul(kb.load("float32", r, b.add(row, k)), _scr(kb, _off(kb, st.slot(vec), k)), flags=REASSOC)
            b.store(b.fadd(b.load(acc), p, flags=REASSOC), acc)
        _set(kb, b.fadd(first, b.load(acc)), _off(kb, st.slot("a"), j))


def _emit_h(kb: KernelBuilder, st: _Step, k: ir.Value, h: ir.Value) -> None:
    """The new hidden state at ``k``: into the state and into Y[t, d, bi, k]."""
    _set(kb, h, _off(kb, st.slot("h"), k))
    t_n, b_n, d_n, _ = st.spec.inputs[0].shape
    kb.store(h, "float32", kb.out, kb.linear([st.t, st.bi, k], [d_n * b_n * st.n, st.n, 1], st.d * b_n * st.n))


def _rnn_step(kb: KernelBuilder, st: _Step, acts: tuple[tuple[EwStep, ...], ...]) -> None:
    _matvec(kb, st, 0, st.n, "h", True)
    with kb.loop(0, st.n) as k:
        _emit_h(kb, st, k, _activate(kb, acts[0], _scr(kb, _off(kb, st.slot("a"), k))))


def _gru_step(kb: KernelBuilder, st: _Step, acts: tuple[tuple[EwStep, ...], ...]) -> None:
    """z, r = f(x + Rb + R h); lbr: hh = g(x + r (Rb + R h)), else g(x + Rb + R (r h)); h = (1 - z) hh + z h."""
    b, n, a = kb.b, st.n, st.slot("a")
    lbr = st.spec.attrs.linear_before_reset
    _matvec(kb, st, 0, 2 * n, "h", True)
    with kb.loop(0, n) as k:
        z = _activate(kb, acts[0], _scr(kb, _off(kb, a, k)))
        r = _activate(kb, acts[0], _scr(kb, _off(kb, a + n, k)))
        _set(kb, z, _off(kb, a, k))
        _set(kb, r, _off(kb, a + n, k))
        _set(kb, b.fmul(r, _scr(kb, _off(kb, st.slot("h"), k))), _off(kb, st.slot("rh"), k))
    _matvec(kb, st, 2 * n, 3 * n, "h" if lbr else "rh", not lbr)
    x_row = _x_row(kb, st)
    with kb.loop(0, n) as k:
        pre = _scr(kb, _off(kb, a + 2 * n, k))
        if lbr:
            x = kb.load("float32", kb.inputs[0], b.add(x_row, _off(kb, 2 * n, k)))
            pre = b.fadd(x, b.fmul(_scr(kb, _off(kb, a + n, k)), pre))
        hh = _activate(kb, acts[1], pre)
        z = _scr(kb, _off(kb, a, k))
        h = _scr(kb, _off(kb, st.slot("h"), k))
        _emit_h(kb, st, k, b.fadd(b.fmul(b.fsub(ir.Constant(F32, 1.0), z), hh), b.fmul(z, h)))


def _lstm_step(kb: KernelBuilder, st: _Step, acts: tuple[tuple[EwStep, ...], ...]) -> None:
    """Gates i, o, f, c: i = f(x_i + P_i c), f = f(x_f + P_f c) (1 - i when coupled), c' = f c + i g(x_c),
    o = f(x_o + P_o c'), h = o h(c')."""
    b, n, a = kb.b, st.n, st.slot("a")
    peep = kb.inputs[6]
    _matvec(kb, st, 0, 4 * n, "h", True)
    with kb.loop(0, n) as k:

        def gate(block: int, c: ir.Value, peephole: int) -> ir.Value:
            pv = kb.load("float32", peep, b.add(i64(st.d * 3 * n + peephole * n), k))
            return _activate(kb, acts[0], b.fadd(_scr(kb, _off(kb, a + block * n, k)), b.fmul(pv, c)))

        c = _scr(kb, _off(kb, st.slot("c"), k))
        i = gate(0, c, 0)
        f = b.fsub(ir.Constant(F32, 1.0), i) if st.spec.attrs.input_forget else gate(2, c, 2)
        cell = _activate(kb, acts[1], _scr(kb, _off(kb, a + 3 * n, k)))
        c = b.fadd(b.fmul(f, c), b.fmul(i, cell))
        _set(kb, c, _off(kb, st.slot("c"), k))
        o = gate(1, c, 1)
        _emit_h(kb, st, k, b.fmul(o, _activate(kb, acts[2], c)))


_STEPS = {"rnn": _rnn_step, "gru": _gru_step, "lstm": _lstm_step}


def _start(kb: KernelBuilder, spec: RecurrenceSpec, d: int, bi: ir.Value) -> None:
    """The initial state of direction ``d`` of item ``bi`` into the scratch buffer; its Y rows zeroed."""
    b = kb.b
    t_n, b_n, d_n, _ = spec.inputs[0].shape
    n = spec.inputs[1].shape[2]
    st = _Step(spec, d, bi, i64(0))
    state = kb.linear([bi], [n], d * b_n * n)
    with kb.loop(0, n) as k:
        _set(kb, kb.load("float32", kb.inputs[4], b.add(state, k)), _off(kb, st.slot("h"), k))
        c0 = kb.load("float32", kb.inputs[5], b.add(state, k)) if spec.attrs.cell == "lstm" else ir.Constant(F32, 0.0)
        _set(kb, c0, _off(kb, st.slot("c"), k))
    with kb.loop(0, t_n) as t, kb.loop(0, n) as k:
        kb.store(ir.Constant(F32, 0.0), "float32", kb.out, kb.linear([t, bi, k], [d_n * b_n * n, n, 1], d * b_n * n))


def _finish(kb: KernelBuilder, spec: RecurrenceSpec, d: int, bi: ir.Value, length: ir.Value) -> None:
    """The final states (Y_h, and Y_c for the LSTM) into rows T and T+1; zero after a length 0."""
    t_n, b_n, d_n, _ = spec.inputs[0].shape
    n = spec.inputs[1].shape[2]
    st = _Step(spec, d, bi, i64(0))
    rows = [("h", t_n)] + ([("c", t_n + 1)] if spec.attrs.cell == "lstm" else [])
    with kb.loop(0, n) as k:
        for name, row in rows:
            at = kb.linear([bi, k], [n, 1], (row * d_n + d) * b_n * n)
            v = _scr(kb, _off(kb, st.slot(name), k))
            ran = kb.b.icmp_signed(">", length, i64(0))
            kb.store(kb.b.select(ran, v, ir.Constant(F32, 0.0)), "float32", kb.out, at)


@register_emitter
def _recurrence(spec: RecurrenceSpec, kb: KernelBuilder) -> None:
    b = kb.b
    t_n, b_n, d_n, _ = spec.inputs[0].shape
    slots = RNN_ACTIVATIONS[spec.attrs.cell]
    for d in range(d_n):
        acts = spec.attrs.activations[d * slots : (d + 1) * slots]
        with kb.loop(0, b_n) as bi:
            _start(kb, spec, d, bi)
            length = kb.clamp_int(b.sext(kb.load("int32", kb.inputs[3], bi), I64), 0, t_n)
            with kb.loop(0, length) as s:
                t = b.sub(b.sub(length, i64(1)), s) if spec.attrs.reverse[d] else s
                _STEPS[spec.attrs.cell](kb, _Step(spec, d, bi, t), acts)
            _finish(kb, spec, d, bi, length)
