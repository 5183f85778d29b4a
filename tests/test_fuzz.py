"""The simulator-against-RTL campaign (vdla.experiments.fuzz, ``vdla fuzz``): a case that matches, a corrupted RTL
result reported as a mismatch with its first differing address and saved as a case that reproduces, a backend
error reported as a finding, and the command line on the sweep executor."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
from rtl_presets import ZU_PRESETS, ZU_RTL

from vdla.cli import main
from vdla.experiments import fuzz
from vdla.experiments.fuzz import CaseResult, replay_case, run_case
from vdla.isa import AluOp, MemType, Stage, decode_program, encode_program
from vdla.runtime import Device
from vdla.runtime.backend import FaultError
from vdla.runtime.rtl.backend import RtlBackend
from vdla.zoo.random_programs import build_program, campaign_config, campaign_configs


def test_cases_match(rtl_library):
    """Programs run on one simulator and one RTL model per process, one after another, leave the same DRAM."""
    results = [run_case("pynq", 0)]
    models = fuzz._backends(campaign_config("pynq"))
    results += [run_case("pynq", seed) for seed in range(1, 4)]
    assert fuzz._backends(campaign_config("pynq")) is models  # one simulator and one RTL model per process
    assert [r.status for r in results] == ["match"] * 4, [r.describe() for r in results]
    assert all(r.cycles_sim and r.cycles_rtl and r.first_diff is None for r in results)
    assert results[0].config == "pynq-z2" and results[0].insns > 20


def test_corrupted_result_is_a_mismatch_saved_as_a_case(rtl_library, monkeypatch, tmp_path):
    """A byte flipped in the RTL's result is a mismatch at its address, in the buffer that holds it; the saved case
    has the program, the images and the address, and running it again reproduces both images."""
    seed = 3
    out = build_program(Device("pynq"), seed).buffers["out"]  # allocation is deterministic: the case's address
    target = out.addr + 37
    real_run = RtlBackend.run

    def corrupt(self, dram, *args, **kwargs):
        result = real_run(self, dram, *args, **kwargs)
        dram.mem[target - dram.base] ^= 0x5A
        return result

    monkeypatch.setattr(RtlBackend, "run", corrupt)
    r = run_case("pynq", seed, tmp_path)
    assert (r.status, r.first_diff, r.diff_bytes, r.where) == ("mismatch", target, 1, "out+0x25")
    case = tmp_path / f"pynq-z2-{seed}"
    assert r.case_dir == str(case)
    record = json.loads((case / "case.json").read_text())
    assert record["first_diff_hex"] == f"{target:#x}" and record["seed"] == seed and record["config"] == "pynq-z2"
    insns = decode_program((case / "program.bin").read_bytes())
    assert len(insns) == r.insns == record["insn_count"]
    assert len((case / "program.s").read_text().splitlines()) == r.insns
    sim, rtl = np.load(case / "dram_sim.npy"), np.load(case / "dram_rtl.npy")
    assert np.flatnonzero(sim != rtl).tolist() == [target - record["dram_base"]]
    np.testing.assert_array_equal(replay_case(case, "sim"), sim)
    np.testing.assert_array_equal(replay_case(case, "rtl"), rtl)  # the corruption is still in place
    again = run_case("pynq", seed)
    assert (again.status, again.first_diff) == ("mismatch", target)
    assert encode_program(build_program(Device("pynq"), seed).insns) == (case / "program.bin").read_bytes()


def test_backend_error_is_a_finding(rtl_library, monkeypatch, tmp_path):
    """A backend that raises (a fault, a deadlock, a failed assertion) makes the case an error, saved, and the
    process's models of that configuration are made again for the next case."""

    def fault(self, *args, **kwargs):
        raise FaultError("instruction 7: injected")

    with monkeypatch.context() as m:
        m.setattr(RtlBackend, "run", fault)
        r = run_case("pynq", 1, tmp_path)
    assert r.status == "error" and r.errors == {"rtl": "FaultError: instruction 7: injected"}
    assert (tmp_path / "pynq-z2-1" / "case.json").exists()
    assert run_case("pynq", 1).ok


def test_fuzz_command(rtl_library, tmp_path, capsys):
    """`vdla fuzz --programs 8` runs on the sweep executor's workers and exits 0 without a finding."""
    assert main(["fuzz", "--programs", "8", "--workers", "2", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "8 programs" in text and "no mismatches" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["programs"] == 8 and summary["clean"] and summary["configs"]["pynq-z2"]["matches"] == 8


def test_fuzz_command_exit_status_on_a_finding(monkeypatch, capsys):
    """A campaign with a mismatch prints it and exits 1."""
    bad = CaseResult("pynq-z2", 5, "mismatch", 40, 100, 101, 0x10006000, 3, "out+0x0")
    tally = fuzz.ConfigTally(programs=1, mismatches=1)

    def campaign(configs, programs, seed, workers, ray, out, on_result, timeout):
        on_result("pynq-z2/5", bad, None)
        return fuzz.CampaignSummary({"pynq-z2": tally}, [bad], {}, 1.0, workers)

    monkeypatch.setattr(fuzz, "run_campaign", campaign)
    assert main(["fuzz", "--programs", "1", "--seed", "5"]) == 1
    text = capsys.readouterr().out
    assert "3 bytes differ from 0x10006000 (out+0x0)" in text and "1 findings" in text


def test_fuzz_items_and_configs():
    """Each configuration gets the same seeds; 'all' is every board preset, pynq-full and the RTL tests' presets."""
    items = fuzz.fuzz_items(["pynq", "kv260"], 3, seed=10)
    assert list(items) == [f"{c}/{s}" for s in (10, 11, 12) for c in ("pynq", "kv260")]
    assert items["kv260/11"] == ("kv260", 11, None)
    assert {"pynq-z2", "aup-zu3", "kv260", "zcu104", "pynq-full", "block8", "batch2"} == set(campaign_configs())
    assert campaign_config("pynq-full").src_out and not campaign_config("pynq-z2").src_out


def test_fuzz_command_refuses_an_unknown_config_and_counts_aliases_once(capsys):
    """An unknown configuration is refused before anything runs, naming the known ones; pynq and pynq-z2 are one."""
    assert main(["fuzz", "--config", "nosuch"]) == 2
    assert "no preset or file named 'nosuch'" in capsys.readouterr().out
    from vdla.experiments.cli import _fuzz_configs

    assert _fuzz_configs(["pynq", "pynq-z2", "all"]) == ["pynq"] + campaign_configs()[1:]


# one configuration per simulated design (tests/rtl_presets.py: zcu104 simulates kv260's design)
DESIGNS = [n for n in campaign_configs() if n not in ZU_PRESETS or n in ZU_RTL]


@pytest.mark.slow
@pytest.mark.parametrize("name", DESIGNS)
def test_campaign_on_every_config(name):
    """50 programs of each configuration the campaign knows match (one RTL build each)."""
    bad = [r.describe() for r in (run_case(name, seed) for seed in range(50)) if not r.ok]
    assert not bad, "\n".join(bad)


@pytest.mark.slow  # a Verilator build of block8
def test_block8_depthwise_5x5_with_several_micro_ops():
    """Regression (found by vdla fuzz: block8 seeds 3, 5, 8, 22): with BLOCK_IN 8 a 5x5 depthwise GEMM of more than
    one micro-op has groups of 25 reads, a free slot and 8 passes, 34 slots, which the sequencer's 5-bit slot
    counter wrapped (the GEMM added nothing). Its results now equal the simulator's, in the random programs that
    found it and in a directed one."""
    for seed in (3, 5, 8, 22):
        r = run_case("block8", seed)
        assert r.ok, r.describe()
    sim, rtl = Device("block8"), Device("block8", backend="rtl")
    got = []
    for dev in (sim, rtl):
        rng = np.random.default_rng(0)
        inp = dev.array(rng.integers(-128, 128, (64, 1, 8), dtype=np.int8))
        wgt = dev.array(rng.integers(-128, 128, (8, 8, 8), dtype=np.int8))
        out = dev.alloc(4 * 4 * 8)
        cmd = dev.commands()
        cmd.load(MemType.INP, 0, inp, 0, 1, 64, 64)
        cmd.load(MemType.WGT, 0, wgt, 0, 1, 8, 8)
        cmd.dep_push(Stage.LOAD, Stage.COMPUTE)
        cmd.dep_pop(Stage.LOAD, Stage.COMPUTE)
        cmd.epi(dw=(5, 1, 6))
        cmd.gemm([(0, 0, 0), (1, 3, 0)], iter_in=2, dst_factor=(0, 2), src_factor=(0, 1), reset=True)
        cmd.gemm([(0, 0, 0), (1, 3, 0)], iter_in=2, dst_factor=(0, 2), src_factor=(0, 1))
        for byte in range(4):  # the four bytes of each int32 sum
            if byte:
                cmd.dep_pop(Stage.STORE, Stage.COMPUTE)
                cmd.alu(AluOp.SHR, [(0, 0)], iter_out=4, dst_factor=(1, 0), imm=8)
            cmd.dep_push(Stage.COMPUTE, Stage.STORE)
            cmd.dep_pop(Stage.COMPUTE, Stage.STORE)
            cmd.store(0, out, byte * 4, 1, 4, 4)
            if byte < 3:
                cmd.dep_push(Stage.STORE, Stage.COMPUTE)
        cmd.synchronize()
        got.append(out.read(np.uint8, (4, 4, 8)))
    assert got[0].any()
    np.testing.assert_array_equal(got[1], got[0])


@pytest.mark.slow  # a local Ray (the dist extra)
def test_campaign_on_ray_matches_the_pool(rtl_library):
    """The same programs as Ray tasks (a local cluster) give the same results as on the process pool."""
    ray = pytest.importorskip("ray", reason="Ray is the dist extra: pip install 'vdla[dist]'")
    on_pool = fuzz.run_campaign(["pynq"], 6, seed=40, workers=2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = fuzz.run_campaign(["pynq"], 6, seed=40, ray="auto")
    finally:
        ray.shutdown()
    assert on_pool.clean and on_ray.clean
    assert asdict(on_ray.tallies["pynq-z2"]) == asdict(on_pool.tallies["pynq-z2"])
