"""vdla.sweep.executor: every item yields one Outcome, through failures, dead workers and timeouts, on the
process pool and on a real local Ray."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from vdla.sweep.executor import ExecutorError, Outcome, RayUnavailableError, run_tasks


def square(x):
    return x * x


def fail_on_odd(x):
    if x % 2:
        raise ValueError(f"odd {x}")
    return x


def flaky(arg):
    """Fails (raises, or kills its worker) on the first try of each item: a marker file remembers the try."""
    path, how = arg
    if not os.path.exists(path):
        open(path, "w").close()
        if how == "exit":
            os._exit(3)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError("first try")
    return "ok"


def sleepy(x):
    if x == "hang":
        time.sleep(60)
    return x


def _run(fn, items, **kw):
    outs = list(run_tasks(fn, items, **kw))
    assert sorted(o.key for o in outs) == sorted(items), "every item yields exactly one Outcome"
    return {o.key: o for o in outs}


def test_pool_values_and_errors():
    outs = _run(fail_on_odd, {str(i): i for i in range(5)}, workers=2, retries=1)
    assert [outs[k].value for k in "024"] == [0, 2, 4]
    assert all(outs[k].error is None and outs[k].attempts == 1 for k in "024")
    for k in "13":
        assert outs[k].value is None and outs[k].attempts == 2
        assert outs[k].error.startswith(f"ValueError: odd {k}") and "fail_on_odd" in outs[k].error


def test_pool_retries_a_dead_worker_and_an_exception(tmp_path):
    items = {f"{how}{i}": (str(tmp_path / f"{how}{i}"), how) for how in ("exit", "kill", "raise") for i in range(2)}
    outs = _run(flaky, items, workers=2, retries=2)
    assert all(o.value == "ok" and o.error is None for o in outs.values()), outs
    assert all(outs[f"raise{i}"].attempts == 2 for i in range(2))
    # a death beside another task in flight is charged to no one (the task then runs alone)
    assert all(1 <= o.attempts <= 2 for o in outs.values())


def always_dies(x):
    if x == "crash":
        os._exit(3)
    time.sleep(0.2)  # in flight when the other worker dies
    return x


def test_a_crashing_task_never_uses_up_another_tasks_tries():
    """With no retries, the tasks sharing the pool with one that kills its worker every time all succeed: each
    death beside others is charged to no one, and the suspects run again alone, where the culprit is found."""
    items = {"crash": "crash", **{f"ok{i}": f"ok{i}" for i in range(5)}}
    outs = _run(always_dies, items, workers=2, retries=0)
    assert outs["crash"].attempts == 1 and outs["crash"].error.startswith("WorkerDied")
    assert all(outs[f"ok{i}"].value == f"ok{i}" and outs[f"ok{i}"].attempts == 1 for i in range(5)), outs


def test_pool_gives_up_after_retries(tmp_path):
    outs = _run(sleepy, {"a": "a", "hang": "hang"}, workers=2, retries=1, timeout=2)
    assert outs["a"].value == "a"
    assert outs["hang"].attempts == 2 and outs["hang"].error.startswith("TimeoutError")


def test_bad_arguments():
    with pytest.raises(ExecutorError, match="retries"):
        run_tasks(square, {"a": 1}, retries=-1)
    assert list(run_tasks(square, {})) == []
    assert Outcome("k", 1, None, 1, 0.0).ok


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1:1", pytest.param("10.255.255.1:6379", marks=pytest.mark.slow)],  # refused; no Ray there (~20 s)
)
def test_unreachable_ray_fails_fast(address):
    pytest.importorskip("ray", reason="Ray is the dist extra: pip install 'vdla[dist]'")
    t0 = time.monotonic()
    with pytest.raises(RayUnavailableError, match=f"cannot (reach|connect to) the Ray cluster at {address}"):
        run_tasks(square, {"a": 1}, ray=address)
    assert time.monotonic() - t0 < 30


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is the dist extra: pip install 'vdla[dist]'")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this test module
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_matches_pool(local_ray, tmp_path):
    items = {str(i): i for i in range(5)}
    on_ray = _run(fail_on_odd, items, ray="auto", retries=1)
    on_pool = _run(fail_on_odd, items, workers=2, retries=1)
    for k in items:
        assert (on_ray[k].value, on_ray[k].attempts) == (on_pool[k].value, on_pool[k].attempts)
        assert (on_ray[k].error or "").split("\n")[0] == (on_pool[k].error or "").split("\n")[0]
    flaky_items = {f"{how}": (str(tmp_path / how), how) for how in ("exit", "kill", "raise")}
    outs = _run(flaky, flaky_items, ray="auto", retries=2)
    assert all(o.value == "ok" and o.attempts == 2 for o in outs.values()), outs
    outs = _run(sleepy, {"a": "a", "hang": "hang"}, ray="auto", retries=0, timeout=3)
    assert outs["a"].value == "a" and outs["hang"].error.startswith("TimeoutError")
