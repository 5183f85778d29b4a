"""The sweep's report: each model's Pareto front of latency against the resources, the table with the front
marked, ``sweep.csv`` and a Pareto plot per model (PNG and SVG).

The resources are the Yosys fit's (LUT, DSP, BRAM36) where the spec asked for ``fit``, else the hard-block
estimate's (DSP, BRAM36: :meth:`HwConfig.hard_block_estimate`), and the report says which. A point is on a
model's front when no other point of the sweep is at least as good in every objective and better in one
(:func:`pareto_front`); only points with every figure (status ``ok``) take part.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from vdla.config import load_config
from vdla.sweep.spec import SweepSpec


def pareto_front(points: list[tuple[float, ...]]) -> list[bool]:
    """Whether each point (objectives, all minimized) is on the front: no other point dominates it (at least as
    good in every objective, better in one). Equal points are all on it."""
    return [
        not any(all(b <= a for a, b in zip(p, q)) and any(b < a for a, b in zip(p, q)) for q in points) for p in points
    ]


def resources_of(rec: dict) -> tuple[str, dict[str, float]]:
    """("fit" or "estimate", the resources a point's front uses: LUT (fit only), DSP, BRAM36)."""
    if "fit" in rec and "used" in rec["fit"]:
        u = rec["fit"]["used"]
        return "fit", {"LUT": u["LUT"], "DSP": u["DSP"], "BRAM36": u["BRAM36"]}
    u = rec["estimate"]["used"]
    return "estimate", {"DSP": u["DSP"], "BRAM36": u["BRAM36"]}


def within_budget(rec: dict) -> bool | None:
    """The fit's verdict where there is one, else the estimate's (hard blocks only)."""
    if "fit" in rec and "within" in rec["fit"]:
        return rec["fit"]["within"]
    return rec.get("estimate", {}).get("within")


def fronts(records: list[dict], models: list[str]) -> dict[str, set[str]]:
    """Model -> the hashes of its front's points."""
    out = {}
    have = [r for r in records if "estimate" in r]
    source = "fit" if any(resources_of(r)[0] == "fit" for r in have) else "estimate"
    for m in models:  # the points with this model's latency and the resources of the one source
        ok = [r for r in have if "latency_ms" in r["models"].get(m, {}) and resources_of(r)[0] == source]
        objs = [(r["models"][m]["latency_ms"], *resources_of(r)[1].values()) for r in ok]
        out[m] = {r["hash"] for r, on in zip(ok, pareto_front(objs)) if on}
    return out


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summarize(records: list[dict], spec: SweepSpec) -> dict:
    """The fronts, the best point within the budget per model and over all (geometric mean of latencies)."""
    models = [m.name for m in spec.models]
    fr = fronts(records, models)
    complete = [r for r in records if r.get("status") == "ok"]
    within = [r for r in complete if within_budget(r)]
    best = {m: min(within, key=lambda r: r["models"][m]["latency_ms"])["hash"] if within else None for m in models}
    overall = min(within, key=lambda r: _geomean([r["models"][m]["latency_ms"] for m in models]), default=None)
    source = "fit" if "fit" in spec.measure else "estimate"
    counts = {s: sum(r.get("status") == s for r in records) for s in ("ok", "invalid", "model_error", "failed")}
    return {"fronts": {m: sorted(h) for m, h in fr.items()}, "best": best, "best_overall": overall and overall["hash"],
            "resources": source, "counts": counts}  # fmt: skip


SHORT = {"_buff_bytes": "", "bus_width_bits": "bus", "clock_mhz": "MHz"}  # the table's parameter names


def _short(name: str, v) -> str:
    """``wgt=64K``, ``bus=64``, ``uram_buffers=acc``: a parameter as the table shows it."""
    for long, short in SHORT.items():
        name = name.replace(long, short)
    if isinstance(v, list | tuple):
        v = ",".join(v) or "none"
    elif type(v) is int and v >= 1024 and v % 1024 == 0:
        v = f"{v // 1024}K"
    return f"{name}={v}"


def _params(rec: dict) -> str:
    p = rec.get("params") or {}
    text = " ".join(_short(k, v) for k, v in p.items())
    return ("base " if rec.get("base") else "") + (text or "(preset)")


def rows(records: list[dict], spec: SweepSpec) -> tuple[list[str], list[list]]:
    """The CSV's header and rows: one row a point."""
    models = [m.name for m in spec.models]
    params = [n for n, _ in spec.space]
    fr = fronts(records, models)
    header = ["hash", "status", "base", *params]
    for m in models:
        header += [f"{m}.cycles", f"{m}.latency_ms", f"{m}.fps", f"{m}.ratio", f"{m}.front"]
        if "rtl" in spec.measure:
            header += [f"{m}.rtl_cycles", f"{m}.rtl_bit_exact"]
    header += ["est.DSP", "est.BRAM36", "est.URAM", "est.within"]
    if "fit" in spec.measure:
        header += ["fit.LUT", "fit.FF", "fit.DSP", "fit.BRAM36", "fit.URAM", "fit.within", "fit.levels"]
        header += [f"fit.margin.{r}" for r in ("LUT", "FF", "DSP", "BRAM36", "URAM")] + ["fit.margin.hard_average"]
    header += ["error"]
    out = []
    for r in records:
        p = r.get("params") or {}
        cfg = r.get("determined_by", {}).get("config", {})  # the base's own values where a point leaves one out
        given = [p[n] if n in p else cfg.get("block_in" if n == "block" else n, "") for n in params]
        row = [r["hash"], r.get("status"), bool(r.get("base")), *(_cell(v) for v in given)]
        for m in models:
            mr = r.get("models", {}).get(m, {})
            row += [mr.get("cycles", ""), mr.get("latency_ms", ""), mr.get("fps", ""), mr.get("ratio", "")]
            row.append(r["hash"] in fr[m])
            if "rtl" in spec.measure:
                row += [mr.get("rtl_cycles", ""), mr.get("rtl_bit_exact", "")]
        est = r.get("estimate", {})
        row += [est.get("used", {}).get(k, "") for k in ("DSP", "BRAM36", "URAM")] + [est.get("within", "")]
        if "fit" in spec.measure:
            f = r.get("fit", {})
            row += [f.get("used", {}).get(k, "") for k in ("LUT", "FF", "DSP", "BRAM36", "URAM")]
            row += [f.get("within", ""), f.get("levels", "")]
            row += [f.get("margins", {}).get(k, "") for k in ("LUT", "FF", "DSP", "BRAM36", "URAM")]
            row.append(f.get("hard_average_margin", ""))
        errors = (
            [r.get("error")]
            + [mr.get("error") for mr in r.get("models", {}).values()]
            + [r.get("fit", {}).get("error")]
        )
        row.append(" | ".join(e.splitlines()[0] for e in errors if e))
        out.append(row)
    return header, out


def _cell(v):
    return ",".join(v) if isinstance(v, list | tuple) else v


def write_csv(records: list[dict], spec: SweepSpec, path: Path) -> Path:
    header, body = rows(records, spec)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(body)
    return path


def plot(records: list[dict], spec: SweepSpec, model: str, stem: Path) -> list[Path]:
    """Latency of ``model`` against each resource (LUT with a fit, DSP, BRAM36): every point, the front
    joined, the base preset's own point starred and the part's budget (failfast limit) drawn; PNG and SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = load_config(spec.base)
    limits = base.part_spec.limits()
    ok = [r for r in records if "latency_ms" in r.get("models", {}).get(model, {})]
    if not ok:
        return []
    source, first = resources_of(ok[0])
    names = list(first)
    front = fronts(records, [model])[model]
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.8), squeeze=False)
    for ax, res in zip(axes[0], names):
        xs = [resources_of(r)[1][res] for r in ok]
        ys = [r["models"][model]["latency_ms"] for r in ok]
        ax.scatter(xs, ys, s=18, c="#999999", label="points")
        fr = sorted((x, y) for x, y, r in zip(xs, ys, ok) if r["hash"] in front)
        if fr:
            ax.plot(*zip(*fr), "o-", c="#1f77b4", ms=5, lw=1, label="Pareto front (all resources)")
        for r, x, y in zip(ok, xs, ys):
            if r.get("base"):
                ax.scatter([x], [y], marker="*", s=160, c="#d62728", zorder=5, label=f"{base.name} preset")
        ax.axvline(limits[res], ls="--", c="#2ca02c", lw=1, label=f"{base.part} budget ({limits[res]:,})")
        ax.set_xlabel(f"{res} ({source})")
        ax.set_ylabel(f"{model} latency (ms, sim)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{model} on {base.name} variants: latency vs resources ({source})", fontsize=10)
    fig.tight_layout()
    paths = []
    for ext in ("png", "svg"):
        p = stem.with_name(f"{stem.name}.{ext}")
        fig.savefig(p, dpi=120)
        paths.append(p)
    plt.close(fig)
    return paths


def write_report(records: list[dict], spec: SweepSpec, out: Path) -> tuple[dict[str, Path], dict]:
    """sweep.csv, pareto_MODEL.png/.svg (matplotlib: the plots extra; left out without it), the summary."""
    files = {"csv": write_csv(records, spec, out / "sweep.csv")}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        matplotlib = None
    if matplotlib is not None:
        for m in spec.models:
            for p in plot(records, spec, m.name, out / f"pareto_{m.name}"):
                files[p.name] = p
    return files, summarize(records, spec)


def table(records: list[dict], spec: SweepSpec, summary: dict):
    """The rich table: one row a point, each model's latency (* on its front), the resources, the budget."""
    from rich.table import Table

    models = [m.name for m in spec.models]
    fr = {m: set(h) for m, h in summary["fronts"].items()}
    src = summary["resources"]
    t = Table(title=f"sweep of {load_config(spec.base).name}: {len(records)} points, resources by {src}"
              + ("" if src == "fit" else " (no fit: hard blocks estimated, LUT unknown)"))  # fmt: skip
    t.add_column("point")
    t.add_column("status")
    for m in models:
        t.add_column(f"{m} ms", justify="right")
        t.add_column("x bound", justify="right")
    for c in (["LUT"] if src == "fit" else []) + ["DSP", "BRAM36", "budget"]:
        t.add_column(c, justify="right")
    t.add_column("why not ok", max_width=48, overflow="ellipsis", no_wrap=True)
    for r in records:
        row = [_params(r), r.get("status", "")]
        for m in models:
            mr = r.get("models", {}).get(m, {})
            mark = "*" if r["hash"] in fr.get(m, ()) else " "
            row += [f"{mr['latency_ms']:.3f}{mark}" if "latency_ms" in mr else "-",
                    f"{mr['ratio']:.2f}" if mr.get("ratio") else "-"]  # fmt: skip
        if "estimate" in r:
            res = resources_of(r)[1]
            row += [f"{res[k]:,.0f}" for k in res] + ["within" if within_budget(r) else "over"]
        else:
            row += ["-"] * ((src == "fit") + 3)
        t.add_row(*row, _why(r))
    return t


def _why(rec: dict) -> str:
    """The first line of a point's error (its config's name left out), or of its first model's."""
    errors = [rec.get("error"), *(m.get("error") for m in rec.get("models", {}).values())]
    errors.append(rec.get("fit", {}).get("error"))
    first = next((e for e in errors if e), "")
    first = first.splitlines()[0] if first else ""
    return first.split("': ", 1)[1] if first.startswith("config '") else first
