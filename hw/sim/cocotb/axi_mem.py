"""A small AXI4 memory for the cocotb benches: in-order reads after a fixed latency, one beat per cycle,
writes with a response; it checks every burst against the AXI rules the RTL must follow (aligned,
INCR, no 4 KiB crossing, at most `max_beats` beats). Signals are driven on the falling clock edge; they are
`dut`'s attributes `prefix` + the AXI name (`arvalid`, `rdata`, ...), and `dut` has `clk_i`."""

from collections import deque

from cocotb.triggers import FallingEdge, ReadOnly

BUS = 8  # bytes per beat


class AxiMemory:
    def __init__(
        self,
        dut,
        mem: bytearray,
        base: int,
        latency: int = 6,
        max_beats: int = 256,
        prefix: str = "",
        write: bool = True,
    ):
        self.dut, self.mem, self.base, self.latency, self.max_beats = dut, mem, base, latency, max_beats
        self.p = prefix
        self.write = write
        self.reads: deque = deque()  # (ready cycle, addr, beats, id)
        self.writes: deque = deque()
        self.resps: deque = deque()
        self.bursts: list[tuple[int, int]] = []  # (addr, beats) of every read burst
        self.cycle = 0
        self.beat = self.wbeat = 0

    def sig(self, name):
        return getattr(self.dut, self.p + name)

    def has(self, name):
        return hasattr(self.dut, self.p + name)

    def check_burst(self, addr: int, beats: int) -> None:
        assert addr % BUS == 0, f"unaligned burst at {addr:#x}"
        assert 1 <= beats <= self.max_beats, f"burst of {beats} beats"
        assert addr // 4096 == (addr + beats * BUS - 1) // 4096, f"burst at {addr:#x} crosses 4 KiB"
        assert self.base <= addr and addr + beats * BUS <= self.base + len(self.mem), f"burst at {addr:#x} outside"

    async def run(self):
        while True:
            await FallingEdge(self.dut.clk_i)
            self.cycle += 1
            self.drive()
            await ReadOnly()
            self.sample()

    def drive(self):
        """Inputs of this cycle, from the memory's state (AR and AW are always accepted)."""
        self.sig("arready").value = 1
        ok = bool(self.reads) and self.reads[0][0] <= self.cycle
        self.sig("rvalid").value = int(ok)
        if ok:
            _, addr, beats, ident = self.reads[0]
            a = addr + self.beat * BUS - self.base
            self.sig("rdata").value = int.from_bytes(self.mem[a : a + BUS], "little")
            self.sig("rresp").value = 0
            if self.has("rid"):
                self.sig("rid").value = ident
                self.sig("rlast").value = int(self.beat + 1 == beats)
        if self.write:
            self.sig("awready").value = 1
            self.sig("wready").value = int(bool(self.writes))
            self.sig("bvalid").value = int(bool(self.resps) and self.resps[0] <= self.cycle)
            self.sig("bresp").value = 0

    def sample(self):
        """The handshakes that complete at the coming rising edge (AR and AW are always ready)."""
        if int(self.sig("arvalid").value):
            addr, beats = int(self.sig("araddr").value), int(self.sig("arlen").value) + 1
            self.check_burst(addr, beats)
            self.bursts.append((addr, beats))
            ident = int(self.sig("arid").value) if self.has("arid") else 0
            self.reads.append((self.cycle + self.latency, addr, beats, ident))
        if int(self.sig("rvalid").value):
            self.beat += 1
            if self.beat == self.reads[0][2]:
                self.reads.popleft()
                self.beat = 0
        if not self.write:
            return
        if int(self.sig("awvalid").value):
            addr, beats = int(self.sig("awaddr").value), int(self.sig("awlen").value) + 1
            self.check_burst(addr, beats)
            self.writes.append([addr, beats])
        if int(self.sig("wvalid").value) and int(self.sig("wready").value):
            addr, beats = self.writes[0]
            a = addr + self.wbeat * BUS - self.base
            self.mem[a : a + BUS] = int(self.sig("wdata").value).to_bytes(BUS, "little")
            self.wbeat += 1
            assert int(self.sig("wlast").value) == (self.wbeat == beats), "WLAST in the wrong place"
            if self.wbeat == beats:
                self.writes.popleft()
                self.wbeat = 0
                self.resps.append(self.cycle + 3)
        if int(self.sig("bvalid").value):
            self.resps.popleft()
