"""The CPU steps: a CPU region's graph with the conversions at its boundary (unpacking what the accelerator
wrote, packing what it reads) and the note on why its operators are not on the accelerator
(:class:`CpuRegions`, a part of :class:`vdla.model.lower.ModelBuilder`).
"""

from __future__ import annotations

import numpy as np

from vdla.graph.graph import Graph, Node
from vdla.graph.opnames import CONV2D, DENSE, MATMUL, RECURRENCE
from vdla.graph.ops import OPS
from vdla.graph.tables import cpu_tables
from vdla.graph.types import TensorType
from vdla.graph.verify import verify
from vdla.model.artifact import CpuStep
from vdla.model.lowering import LOWERINGS, network_macs
from vdla.model.views import packed


class CpuRegions:
    """The model builder's CPU regions (a mixin of :class:`~vdla.model.lower.ModelBuilder`, whose DRAM tensors
    and steps it uses and extends)."""

    def cpu_region(self, nodes, accel_needs, host_needs, accel_out, notes, extra_outputs=()) -> CpuStep:
        """A CPU step: ``nodes`` with unpacking of the accelerator outputs it reads and packing of the values
        an accelerator layer reads; ``extra_outputs`` are values to convert only (an accelerator output a
        graph output needs, a graph input an accelerator reads)."""
        cfg = self.cfg
        defined = {n.output for n in nodes}
        reads = [i for n in nodes for i in n.inputs if i not in defined and i not in self.g.params]
        reads = list(dict.fromkeys([*reads, *extra_outputs]))
        g_inputs: dict[str, TensorType] = {}
        pre: list[Node] = []
        dram_inputs: dict[str, str] = {}
        for v in reads:
            t = self.types[v]
            if v not in accel_out:
                g_inputs[v] = t
                continue
            dname = self.pending[v]  # read the packed accelerator output and unpack it
            shape, dtype = self.dram[dname]
            g_inputs[f"{v}@in"] = TensorType(shape, dtype)
            dram_inputs[f"{v}@in"] = dname
            nchw = packed(t, cfg, cfg.block_out)[1]
            target = v if len(t.shape) == 4 else f"{v}@nchw"
            pre.append(Node("unpack_blocked", (f"{v}@in",), target, {"channels": nchw[1], "images": nchw[0]}))
            if len(t.shape) != 4:
                pre.append(Node("reshape", (target,), v, {"shape": list(t.shape)}))
        post: list[Node] = []
        outputs: list[str] = []
        dram_outputs: dict[str, str] = {}
        for v in dict.fromkeys([*(n.output for n in nodes), *extra_outputs]):
            if v in host_needs(defined) or (v in extra_outputs and v in accel_out):
                outputs.append(v)
            if v in accel_out:
                continue
            for block in sorted(accel_needs.get(v, ())):
                nchw = packed(self.types[v], cfg, block)[1]
                src = v
                if len(self.types[v].shape) != 4:
                    src = f"{v}@nchw{block}"
                    post.append(Node("reshape", (v,), src, {"shape": list(nchw)}))
                out = f"{v}@out{block}"
                post.append(Node("pack_blocked", (src,), out, {"batch": cfg.batch, "block": block}))
                outputs.append(out)
                dram_outputs[out] = self.dram_tensor(v, block)
            if v in self.weight_needs:  # (N, K) -> the packed weight layout
                post.append(Node("reshape", (v,), f"{v}@oihw", {"shape": [*self.types[v].shape, 1, 1]}))
                layout = {"batch": cfg.block_out, "block": cfg.block_in}
                post.append(Node("pack_blocked", (f"{v}@oihw",), f"{v}@outwgt", layout))
                outputs.append(f"{v}@outwgt")
                dram_outputs[f"{v}@outwgt"] = self.weight_tensor(v)
        params = {p: self.g.params[p] for n in nodes for p in n.inputs if p in self.g.params}
        ptypes = {p: t for p, t in self.g.param_types.items() if p in params}
        graph = Graph(g_inputs, [*pre, *nodes, *post], outputs, params, ptypes, name=f"cpu{len(self.steps)}")
        graph = cpu_tables(graph)
        verify(graph, after="partitioning (CPU region)")
        unexplained = [n for n in nodes if n.output not in self.explained]
        note = "; ".join([*(f"{k}: {v}" for k, v in notes.items() if k in defined), *_cpu_reasons(unexplained)])
        name = nodes[-1].output if nodes else f"convert {','.join(extra_outputs)}"
        macs = sum(node_macs(n, self.types) for n in nodes)
        return CpuStep(name, graph, dram_inputs, dram_outputs, macs, note, self.guard(n.output for n in nodes))


def node_macs(node: Node, types: dict[str, TensorType]) -> int:
    """Multiply-accumulates of a conv2d, dense, matmul or recurrence node (its steps' H @ R^T; the input
    projection is a dense node of its own) of the graph typed by ``types`` (0 for others)."""
    if node.op == CONV2D:
        n, oc, oh, ow = types[node.output].shape
        _, icg, kh, kw = types[node.inputs[1]].shape
        return network_macs(node.attrs, n * oc * oh * ow * icg * kh * kw)
    if node.op == DENSE:
        m, n = types[node.output].shape
        return m * n * types[node.inputs[1]].shape[1]
    if node.op == MATMUL:
        return int(np.prod(types[node.output].shape)) * types[node.inputs[1]].shape[-2]  # K of (..., K, N)
    if node.op == RECURRENCE:  # each step's H @ R^T: gates (T, B, D, G*H), R (D, G*H, H)
        t_n, b_n, d_n, gh = types[node.inputs[0]].shape
        return t_n * b_n * d_n * gh * types[node.inputs[1]].shape[2]
    return 0


HOST_OPS = ("quantize", "dequantize", "cast", "reshape", "pack_blocked", "unpack_blocked", "im2col")  # boundaries
# operators the accelerator takes in one form only, and why a CPU step holds them otherwise
ONLY_WHEN = {
    "concat": "stored in place only as a channel concat of conv2d outputs in whole channel blocks, or as constant "
    "token rows beside one accelerator layer's int8 (tokens, features) output read by accelerator layers, batch 1",
    "interleave": "stored in place only when its phases are conv2d layers nothing else reads",
    "table": "runs in an epilogue only right after a conv2d/dense layer's int8 output",
    "take": "read in place only as consecutive whole rows of a (tokens, features) accelerator output, batch 1",
}


def _cpu_reasons(nodes: list[Node]) -> list[str]:
    """Why a CPU step's operators (the host's conversions aside) are not on the accelerator: the one form it
    takes them in (:data:`ONLY_WHEN`), else by the operator registry, an operator without an accelerator
    lowering (:data:`~vdla.model.lowering.LOWERINGS`) or an elementwise step outside every layer's epilogue."""
    ops = sorted({n.op for n in nodes if n.op not in HOST_OPS and n.op in OPS and n.op not in ONLY_WHEN})
    kinds = {
        "no accelerator form": [op for op in ops if not OPS[op].epilogue_step and op not in LOWERINGS],
        "not in a layer's epilogue": [op for op in ops if OPS[op].epilogue_step],
        "not taken by the accelerator here": [op for op in ops if not OPS[op].epilogue_step and op in LOWERINGS],
    }
    only = sorted({n.op for n in nodes if n.op in ONLY_WHEN})
    return [f"{op}: {ONLY_WHEN[op]}" for op in only] + [f"{', '.join(v)}: {k}" for k, v in kinds.items() if v]
