"""A minimal in-project stand-in of the PYNQ calls vdla's pynq backend and simulated board use, for machines
where the real ``pynq`` package cannot be installed (the tests then say so). Each piece follows PYNQ 4.0's
own code (pynq/pl_server/device.py, pynq/mmio.py, pynq/buffer.py): device discovery through ``_probe_``,
``MMIO`` over ``read_registers``/``write_registers`` on a ``REGISTER_RW`` device, ``allocate`` on the active
device and ``PynqBuffer.flush``/``invalidate`` calling the device with the buffer's bo, offset and size."""

from pynq.buffer import allocate
from pynq.mmio import MMIO
from pynq.pl_server import Device

__all__ = ["MMIO", "Device", "allocate"]
__version__ = "stand-in"
