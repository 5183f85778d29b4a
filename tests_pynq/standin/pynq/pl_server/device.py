"""``pynq.Device`` and its discovery, as in PYNQ 4.0's pynq/pl_server/device.py."""


class DeviceMeta(type):
    """Registers each subclass that defines ``_probe_`` under its ``_probe_priority_``."""

    _subclasses = {}

    def __init__(cls, name, bases, attrs):
        if "_probe_" in attrs:
            priority = attrs["_probe_priority_"]
            if priority in DeviceMeta._subclasses and DeviceMeta._subclasses[priority].__name__ != name:
                raise RuntimeError("Multiple Device subclasses with same priority")
            DeviceMeta._subclasses[priority] = cls
        super().__init__(name, bases, attrs)

    @property
    def devices(cls):
        if not hasattr(cls, "_devices"):
            cls._devices = []
            for key in sorted(DeviceMeta._subclasses.keys()):
                cls._devices.extend(DeviceMeta._subclasses[key]._probe_())
        return cls._devices

    @property
    def active_device(cls):
        if not hasattr(cls, "_active_device"):
            if len(cls.devices) == 0:
                raise RuntimeError("No Devices Found")
            cls._active_device = cls.devices[0]
        return cls._active_device

    @active_device.setter
    def active_device(cls, value):
        cls._active_device = value


class Device(metaclass=DeviceMeta):
    def __init__(self, tag, warn=False):
        if type(tag) is not str:
            raise ValueError("Argument 'tag' must be a string")
        self.tag = tag
        self.parser = None

    def allocate(self, shape, dtype, **kwargs):
        return self.default_memory.allocate(shape, dtype, **kwargs)

    def has_capability(self, cap):
        if not hasattr(self, "capabilities"):
            return False
        return cap in self.capabilities and self.capabilities[cap]
