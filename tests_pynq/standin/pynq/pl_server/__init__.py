from pynq.pl_server.device import Device

__all__ = ["Device"]
