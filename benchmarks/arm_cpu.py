"""The boards' CPU steps under emulation: the artifact's ahead-of-time ARM code against the numpy kernels.

    python benchmarks/arm_cpu.py [--json benchmarks/arm_cpu.json] [--only MODEL ...] [--arch armhf ...] [--count]

For each model of ``tests_arm/emulation.py`` (compiled for the pynq preset with armv7 and AArch64 code) and
each emulated board CPU (``qemu-arm-static -cpu cortex-a9``, ``qemu-aarch64-static -cpu cortex-a53``;
Debian's python3 and numpy, no llvmlite), one guest process runs the model once with the artifact's native
kernels (sim backend), recording each CPU step's inputs, then times every CPU step on those inputs with the
native kernels (``CompiledGraph.run``, the best of 3) and with the numpy kernels (``evaluate``, the graph
interpreter the executor falls back to, the best of 2). The ratio of the sums is taken within that one run.
The host's CPU-step times (JIT and numpy, ``RunReport.cpu_ms``) are measured alongside for context.

Instruction counts (``--count``): the native kernels' guest instructions, counted by qemu's execution log
restricted to the kernel library's addresses (``-d in_asm,exec,nochain -dfilter``: each translated block's
instructions times its executions) in a guest run of every CPU step once on the recorded inputs. Debian's
qemu 7.2 is built without plugin support, and this machine exposes no PMU to ``perf stat``.

The 667 MHz Cortex-A9 estimate (an estimate, not a measurement): the armv7 kernels' instruction count
divided by 667 MHz times an assumed IPC of 0.5 to 1.0 (the A9 issues at most two instructions per cycle;
cache misses on the Zynq's DDR3 pull streaming kernels towards the low end). The numpy kernels' estimate is
that range times the emulated ratio.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
A9_MHZ = 667
A9_IPC = (0.5, 1.0)
NATIVE_REPEAT, REFERENCE_REPEAT = 3, 2


def _best_ms(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - t0) * 1e3)
    return best


def guest_main(artifact: str, inputs: str, feeds_path: str, mode: str) -> None:
    """In the guest. ``bench``: run the model natively recording the CPU steps' inputs (saved to
    ``feeds_path``), time each step native and numpy, print a JSON line. ``maps``: print the process's
    mappings once the kernels are loaded. ``count``: the same, then run every CPU step once on the saved
    inputs (for the instruction count)."""
    from vdla.graph.interp import evaluate
    from vdla.model import load

    module = load(artifact, cpu_kernels="native", trust_native=True)  # compiled by this benchmark, unsigned
    graphs = module._cpu  # step index -> CompiledGraph
    if mode != "bench":
        print(json.dumps({"maps": Path("/proc/self/maps").read_text()}), flush=True)
        if mode == "count":
            with np.load(feeds_path) as z:
                saved = {k: z[k] for k in z.files}
            for i, g in graphs.items():
                g.run(
                    {k.split("/", 1)[1]: v for k, v in saved.items() if k.startswith(f"{i}/")}, module._buffers.get(i)
                )
        return
    recorded: dict[int, dict[str, np.ndarray]] = {}
    runs = {i: g.run for i, g in graphs.items()}
    for i, g in graphs.items():
        g.run = _recording(runs[i], recorded, i)
    module.run(dict(np.load(inputs)))
    np.savez(feeds_path, **{f"{i}/{k}": v for i, feeds in recorded.items() for k, v in feeds.items()})
    steps = module.artifact.steps
    native = [_best_ms(lambda i=i: runs[i](recorded[i], module._buffers.get(i)), NATIVE_REPEAT) for i in graphs]
    reference = [_best_ms(lambda i=i: evaluate(steps[i].graph, recorded[i]), REFERENCE_REPEAT) for i in graphs]
    record = {
        "machine": platform.machine(),
        "numpy": np.__version__,
        "steps": len(native),
        "native_ms": sum(native),
        "reference_ms": sum(reference),
        "native_step_ms": native,
        "reference_step_ms": reference,
    }
    print(json.dumps(record))


def _recording(run, store: dict, i: int):
    """``run`` (a CompiledGraph's), keeping a copy of the first feeds it gets in ``store[i]``."""

    def wrapped(feeds, buffers=None):
        store.setdefault(i, {k: np.array(v) for k, v in feeds.items()})
        return run(feeds, buffers)

    return wrapped


def _lib_range(maps: str, target: str) -> tuple[int, int]:
    """[lo, hi) of the mappings of the kernel library (a temporary file named vdla-<target>-*.so)."""
    spans = [
        tuple(int(v, 16) for v in line.split()[0].split("-")) for line in maps.splitlines() if f"vdla-{target}-" in line
    ]
    if not spans:
        raise RuntimeError(f"the kernel library vdla-{target}-*.so is not mapped in the guest")
    return min(lo for lo, _ in spans), max(hi for _, hi in spans)


TB_HEAD = re.compile(r"^IN:")
INSN = re.compile(r"^0x([0-9a-f]+):")
EXEC = re.compile(r"Trace \d+: 0x[0-9a-f]+ \[[0-9a-f]+/([0-9a-f]+)/")


def count_instructions(log: Path, span: tuple[int, int] = (0, 1 << 64)) -> int:
    """Guest instructions executed in the addresses ``span`` ([lo, hi)), from a qemu ``-d in_asm,exec,nochain``
    log: each translated block's instruction count (``in_asm``: the lines after ``IN:``) times its executions
    (``exec`` lines give the block's guest pc)."""
    sizes: dict[int, int] = {}
    total = 0
    pc: int | None = None  # the block being listed
    in_block = False
    with open(log, errors="replace") as f:
        for line in f:
            if line.startswith("Trace"):
                m = EXEC.search(line)
                if m and span[0] <= (at := int(m.group(1), 16)) < span[1]:
                    total += sizes.get(at, 0)
                in_block = False
            elif TB_HEAD.match(line):
                in_block, pc = True, None
            elif in_block and (m := INSN.match(line)):
                if pc is None:
                    pc = int(m.group(1), 16)
                    sizes[pc] = 0
                sizes[pc] += 1
    return total


def _guest_call(path: Path, inputs: Path, feeds: Path, mode: str) -> list[str]:
    call = f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import arm_cpu; "
    return ["-c", call + f"arm_cpu.guest_main({str(path)!r}, {str(inputs)!r}, {str(feeds)!r}, {mode!r})"]


LOG_MARGIN = 8 << 20  # the counting run logs this far around where the first run found the library: qemu's own
# logging moves the guest's mmaps (BERT-tiny's library lay 512 KB lower with it), the count keeps the library's


def _count(arch, root: Path, path: Path, inputs: Path, feeds: Path, tmp: Path) -> int:
    """Guest instructions of the native kernels, every CPU step once: a first guest run finds the library's
    address, a second logs the execution around it (:data:`LOG_MARGIN`) and counts what ran inside the library
    where that run mapped it."""
    from emulation import guest

    code, out, err, _ = guest(arch, root, _guest_call(path, inputs, feeds, "maps"), tmp / "home")
    if code != 0:
        raise RuntimeError(err[-2000:])
    lo, hi = _lib_range(json.loads(out.splitlines()[0])["maps"], arch.target)
    log = tmp / f"exec-{arch.debian}.log"
    qemu, *rest = arch.command(root)
    lo_log, hi_log = max(lo - LOG_MARGIN, 0), hi + LOG_MARGIN
    cmd = [qemu, "-d", "in_asm,exec,nochain", "-dfilter", f"{lo_log:#x}..{hi_log - 1:#x}", "-D", str(log), *rest]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp / "home"), "VDLA_CACHE_DIR": str(tmp)}
    r = subprocess.run([*cmd, *_guest_call(path, inputs, feeds, "count")], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    again = _lib_range(json.loads(r.stdout.splitlines()[0])["maps"], arch.target)
    if not lo_log <= again[0] < again[1] <= hi_log:
        raise RuntimeError(
            f"the kernel library moved {again[0] - lo:+#x} between runs, beyond the log's margin ({LOG_MARGIN:#x})"
        )
    n = count_instructions(log, again)
    log.unlink()
    return n


def _host_ms(path: Path, feed: dict[str, np.ndarray]) -> dict[str, float]:
    from vdla.model import load

    out = {}
    for kind in ("jit", "reference"):
        m = load(path, cpu_kernels=kind)
        times = []
        for _ in range(3):
            m.run(feed)
            times.append(m.last_report.cpu_ms)
        out[kind] = min(times)
    return out


def _bench(name: str, arch, root: Path, path: Path, inputs: Path, tmp: Path, count: bool) -> dict:
    from emulation import guest

    feeds = tmp / f"{name}-{arch.debian}-feeds.npz"
    t0 = time.perf_counter()
    code, out, err, _ = guest(arch, root, _guest_call(path, inputs, feeds, "bench"), tmp / "home")
    if code != 0:
        raise RuntimeError(f"{name} on {arch.debian}: {err[-2000:]}")
    rec = json.loads(out.strip().splitlines()[-1])
    rec.update(model=name, arch=arch.debian, cpu=arch.cpu, target=arch.target, guest_s=time.perf_counter() - t0)
    rec["ratio"] = rec["reference_ms"] / rec["native_ms"]
    if count:
        n = rec["native_instructions"] = _count(arch, root, path, inputs, feeds, tmp)
        if arch.debian == "armhf":
            est = [n / (ipc * A9_MHZ * 1e3) for ipc in sorted(A9_IPC, reverse=True)]
            rec["a9_667mhz_estimate_ms"] = est
            rec["a9_667mhz_numpy_estimate_ms"] = [e * rec["ratio"] for e in est]
    return rec


def host_main(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO / "tests_arm"))
    from concurrent.futures import ThreadPoolExecutor

    from emulation import ARCHES, MODELS, compile_for_boards, rootfs

    arches = [ARCHES[a] for a in (args.arch or ARCHES)]
    roots = {a.debian: rootfs(a) for a in arches}
    records = []
    with tempfile.TemporaryDirectory(prefix="vdla-arm-bench-") as tmp:
        tmp = Path(tmp)
        for name in args.only or MODELS:
            path, feed = compile_for_boards(name, tmp)
            inputs = tmp / f"{name}-inputs.npz"
            np.savez(inputs, **feed)
            host = _host_ms(path, feed)
            with ThreadPoolExecutor(len(arches)) as pool:  # the guests are single-threaded
                jobs = [pool.submit(_bench, name, a, roots[a.debian], path, inputs, tmp, args.count) for a in arches]
                for job in jobs:
                    rec = job.result()
                    rec["host_jit_ms"], rec["host_reference_ms"] = host["jit"], host["reference"]
                    records.append(rec)
                    print(_line(rec), file=sys.stderr, flush=True)
                    if args.json:  # after every record: a long run interrupted keeps what it measured
                        _write(args.json, records)
    return 0


def _write(path: str, records: list[dict]) -> None:
    meta = {
        "host": _host_cpu(),
        "qemu": _qemu_version(),
        "a9_estimate": f"instructions / ({A9_IPC[0]}..{A9_IPC[1]} IPC x {A9_MHZ} MHz)",
        "records": records,
    }
    Path(path).write_text(json.dumps(meta, indent=1) + "\n")


def _host_cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _qemu_version() -> str:
    r = subprocess.run(["qemu-arm-static", "--version"], capture_output=True, text=True)
    return r.stdout.splitlines()[0] if r.returncode == 0 else "unknown"


def _line(r: dict) -> str:
    s = (
        f"{r['model']:>13} {r['arch']} ({r['cpu']}): {r['steps']} CPU steps, native {r['native_ms']:.1f} ms, "
        f"numpy {r['reference_ms']:.1f} ms, ratio {r['ratio']:.1f}x; host JIT {r['host_jit_ms']:.2f} ms, "
        f"numpy {r['host_reference_ms']:.2f} ms"
    )
    if "native_instructions" in r:
        s += f"; {r['native_instructions'] / 1e6:.1f} M guest instructions"
    if "a9_667mhz_estimate_ms" in r:
        lo, hi = r["a9_667mhz_estimate_ms"]
        s += f"; Cortex-A9 667 MHz estimate {lo:.1f}-{hi:.1f} ms"
    return s


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the records here")
    p.add_argument("--only", action="append", help="a model (repeatable)")
    p.add_argument("--arch", action="append", help="armhf or arm64 (repeatable)")
    p.add_argument("--count", action="store_true", help="count the native kernels' guest instructions")
    return host_main(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
