"""The points of a sweep: every combination (``grid``), a seeded sample of them (``random``), or Optuna's
NSGA-II multi-objective sampler asked for points generation by generation (``nsga2``, :class:`Nsga2Search`).

A point is a dict parameter -> value, its keys in the spec's order; the empty dict is the base preset itself.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from vdla.errors import VdlaError


def grid(space: tuple[tuple[str, tuple[Any, ...]], ...]) -> list[dict[str, Any]]:
    """Every combination of the values, the last parameter varying fastest."""
    names = [n for n, _ in space]
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in space))]


def size(space) -> int:
    return math.prod(len(v) for _, v in space)


def random_points(space, samples: int, seed: int) -> list[dict[str, Any]]:
    """``samples`` distinct points drawn with ``seed`` (the whole grid, in grid order, when it has no more)."""
    if samples >= size(space):
        return grid(space)
    rng = random.Random(seed)
    seen: set[tuple] = set()
    out = []
    while len(out) < samples:
        combo = tuple(rng.randrange(len(v)) for _, v in space)
        if combo not in seen:
            seen.add(combo)
            out.append({n: v[i] for (n, v), i in zip(space, combo)})
    return out


def _label(v: Any) -> Any:
    """A value as an Optuna categorical choice (None, bool, int, float or str): a list of buffers as a string."""
    return ",".join(v) if isinstance(v, tuple) else v


class Nsga2Search:
    """Optuna's NSGA-II (``NSGAIISampler``) over the space's values as categorical choices, every objective
    minimized. :meth:`ask` gives a trial and its point; :meth:`tell` the point's objectives, or None when the
    point has none (invalid, failed): the trial is then marked failed and the sampler avoids it."""

    def __init__(self, space, objectives: int, seed: int, population: int):
        try:
            import optuna
        except ImportError:
            raise VdlaError("--search nsga2 needs Optuna: pip install 'vdla[sweep]'") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.space = space
        sampler = optuna.samplers.NSGAIISampler(population_size=max(2, population), seed=seed)
        self.study = optuna.create_study(directions=["minimize"] * objectives, sampler=sampler)

    def ask(self) -> tuple[Any, dict[str, Any]]:
        trial = self.study.ask()
        point = {}
        for name, values in self.space:
            labels = [_label(v) for v in values]
            point[name] = values[labels.index(trial.suggest_categorical(name, labels))]
        return trial, point

    def tell(self, trial, values: list[float] | None) -> None:
        if values is None or any(not math.isfinite(v) for v in values):
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, values)
