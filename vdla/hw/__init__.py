"""Chip-design tools around the accelerator's RTL (``hw/rtl``): none of them is needed to run programs.

* :mod:`vdla.hw.rtlgen`: the generated package ``hw/rtl/vdla_pkg.sv`` and ``docs/registers.md``
  (``vdla gen-rtl``).
* :mod:`vdla.hw.lint`: the Verilator ``-Wall`` lint gate (``python -m vdla.hw.lint``, in ``make lint``).
* :mod:`vdla.hw.cocotb_benches`: the cocotb benches of the units and of the whole accelerator.
* :mod:`vdla.hw.fit`: synthesis for the PYNQ-Z1's part with Yosys and the resources it reports
  (``vdla fit``), with :mod:`vdla.hw.lut_depth`, the timing proxy in LUT levels.
* :mod:`vdla.hw.cli`: the ``vdla`` sub-commands ``gen-rtl``, ``rtl-build`` and ``fit``.

The Verilator build of the simulation model that the ``rtl`` backend runs is part of the runtime
(:mod:`vdla.runtime.rtl.verilate`); these tools take the RTL's file list and Verilator's environment from it.
Nothing here is imported by ``import vdla`` or ``import vdla.hw``.
"""
