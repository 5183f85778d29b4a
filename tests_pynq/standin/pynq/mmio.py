"""``pynq.MMIO`` on a ``REGISTER_RW`` device, as in PYNQ 4.0's pynq/mmio.py (there, the word array is a
tinynumpy array whose hook calls ``read_registers``/``write_registers`` four bytes at a time)."""

import struct


class MMIO:
    def __init__(self, base_addr, length=4, device=None, **kwargs):
        if device is None:
            from pynq.pl_server.device import Device

            device = Device.active_device
        self.device = device
        if base_addr < 0 or length < 0:
            raise ValueError("Base address or length cannot be negative.")
        self.base_addr = base_addr
        self.length = length
        if not self.device.has_capability("REGISTER_RW"):
            raise ValueError("Device does not have capabilities for MMIO")

    def _word(self, idx):
        return struct.unpack("<I", self.device.read_registers(self.base_addr + 4 * idx, 4))[0]

    def read(self, offset=0, length=4, word_order="little"):
        if length not in [1, 2, 4, 8]:
            raise ValueError("MMIO currently only supports 1, 2, 4 and 8-byte reads.")
        if offset < 0:
            raise ValueError("Offset cannot be negative.")
        if length == 8 and word_order not in ["big", "little"]:
            raise ValueError("MMIO only supports big and little endian.")
        idx = offset >> 2
        if offset % 4:
            raise MemoryError("Unaligned read: offset must be multiple of 4.")
        lsb = self._word(idx)
        if length == 8:
            if word_order == "little":
                return (self._word(idx + 1) << 32) + lsb
            return (lsb << 32) + self._word(idx + 1)
        return lsb & ((2 ** (8 * length)) - 1)

    def write(self, offset, data):
        if offset < 0:
            raise ValueError("Offset cannot be negative.")
        if offset % 4:
            raise MemoryError("Unaligned write: offset must be multiple of 4.")
        if type(data) is int:
            self.device.write_registers(self.base_addr + offset, struct.pack("<I", data))
        elif type(data) is bytes:
            self.device.write_registers(self.base_addr + offset, data)
        else:
            raise ValueError("Data type must be int or bytes.")
