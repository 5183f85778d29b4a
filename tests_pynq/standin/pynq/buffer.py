"""``pynq.allocate`` and ``PynqBuffer``, as in PYNQ 4.0's pynq/buffer.py (without the board's munmap)."""

import numpy as np


class PynqBuffer(np.ndarray):
    def __new__(cls, *args, device=None, device_address=0, bo=0, coherent=False, **kwargs):
        self = super().__new__(cls, *args, **kwargs)
        self.device_address = device_address
        self.coherent = coherent
        self.bo = bo
        self.device = device
        self.offset = 0
        self.freed = False
        return self

    # numpy 2 arrays have a read-only ``device`` (the array API); PYNQ 4.0 pins numpy<2, the stand-in
    # runs on either
    @property
    def device(self):
        return self._pynq_device

    @device.setter
    def device(self, value):
        self._pynq_device = value

    def __array_finalize__(self, obj):
        if isinstance(obj, PynqBuffer) and obj.coherent is not None:
            self.coherent = obj.coherent
            offset = self.virtual_address - obj.virtual_address
            self.device_address = obj.device_address + offset
            self.offset = obj.offset + offset
            self.device = obj.device
            self.bo = obj.bo
        else:
            self.device_address = None
            self.coherent = None

    def __del__(self):
        self.freebuffer()

    def freebuffer(self):
        """A pooled buffer goes back to its allocator (the board's own buffers are not mmapped here)."""
        if hasattr(self, "memory") and getattr(self, "pointer", 0):
            if self.return_to:
                self.return_to.return_pointer(self.pointer)
            self.pointer = 0

    @property
    def cacheable(self):
        return not self.coherent

    @property
    def physical_address(self):
        return self.device_address

    @property
    def virtual_address(self):
        return self.__array_interface__["data"][0]

    def flush(self):
        if not self.coherent:
            self.device.flush(self.bo, self.offset, self.virtual_address, self.nbytes)

    def invalidate(self):
        if not self.coherent:
            self.device.invalidate(self.bo, self.offset, self.virtual_address, self.nbytes)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.freebuffer()
        return 0


def allocate(shape, dtype="u4", target=None, **kwargs):
    from pynq.pl_server import Device

    if target is None:
        target = Device.active_device
    return target.allocate(shape, dtype, **kwargs)
