"""The RTL lint gate: `verilator --lint-only -Wall` reports nothing on any target (waivers, each with its
reason, in hw/rtl/lint/verilator.vlt), and the gate does report a warning when there is one."""

from __future__ import annotations

from vdla.hw.lint import LintTarget, lint, lint_all, targets


def test_rtl_is_lint_clean():
    results = lint_all()
    assert {"top", "top-block8", "bench-top", "directed-queues"} <= set(results)
    assert all(not lines for lines in results.values()), {k: v for k, v in results.items() if v}


def test_the_gate_reports_warnings(tmp_path):
    bad = tmp_path / "lint_probe.sv"
    bad.write_text(
        "module lint_probe (input logic clk_i, input logic [7:0] a_i, output logic [3:0] y_o);\n"
        "  logic spare;\n"
        "  always_ff @(posedge clk_i) y_o <= a_i;\n"
        "endmodule\n"
    )
    lines = lint(LintTarget("probe", "lint_probe", extra_sources=(bad,)), tmp_path)
    assert any("WIDTH" in line for line in lines) and any("UNUSED" in line for line in lines), lines
    assert len(targets()) >= 9
