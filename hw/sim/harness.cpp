// C++ harness around the Verilated accelerator, loaded by vdla.runtime.rtl through ctypes.
//
// It clocks the model in a tight loop and serves its AXI4 master from a DRAM model that works on
// the caller's memory (a numpy array) in place: in-order reads with a fixed latency from the
// accepted AR to the first beat, one beat of the configuration's bus width (VH_BUS_BITS: 32, 64, or a
// multiple of 32 above, which Verilator holds as a VlWide) per cycle on the read and on the write channel, an idle
// gap after every burst, and a write response a fixed latency after the last beat of a burst.
// Accesses outside the region get SLVERR: reads return zeros, writes are dropped.
//
// Built with VL_USER_STOP defined: a failed RTL assertion (the model is built with --assert) or a $stop
// does not abort the process. vl_stop below records where it happened and stops the clock; the Python
// side (vdla.runtime.rtl.harness) reads it with vh_stopped and raises.
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "Vvdla_top.h"
#include "verilated.h"
#ifdef VH_TRACE
#include "verilated_fst_c.h"
#endif

namespace {
// Per model (context): "file:line" of its first $stop or failed assertion since its last reset.
std::map<const VerilatedContext*, std::string> g_stops;
}  // namespace

#ifdef VL_USER_STOP
void vl_stop(const char* filename, int linenum, const char* hier) {
  (void)hier;
  VerilatedContext* ctx = Verilated::threadContextp();
  ctx->gotError(true);
  ctx->gotFinish(true);
  g_stops.emplace(ctx, std::string(filename) + ":" + std::to_string(linenum));  // keeps the first
}
#endif

namespace {

static_assert(VH_BUS_BITS == 32 || VH_BUS_BITS % 64 == 0, "the harness serves a bus of 32 or a multiple of 64 bits");
constexpr int kBusBytes = VH_BUS_BITS / 8;

// A beat between the DRAM model's bytes and the model's data port: IData (32 bits), QData (64) or VlWide.
inline void beat_in(uint32_t& port, const uint8_t* src) { std::memcpy(&port, src, 4); }
inline void beat_in(uint64_t& port, const uint8_t* src) { std::memcpy(&port, src, 8); }
template <std::size_t N>
inline void beat_in(VlWide<N>& port, const uint8_t* src) {
  std::memcpy(port.data(), src, N * 4);
}
inline void beat_out(uint32_t port, uint8_t* dst) { std::memcpy(dst, &port, 4); }
inline void beat_out(uint64_t port, uint8_t* dst) { std::memcpy(dst, &port, 8); }
template <std::size_t N>
inline void beat_out(const VlWide<N>& port, uint8_t* dst) {
  std::memcpy(dst, port.data(), N * 4);
}

struct Burst {
  uint64_t addr;
  uint32_t beats;
  uint32_t id;
  uint64_t ready;  // first cycle the data (read) or response (write) may appear
  bool err;
};

struct Harness {
  std::unique_ptr<VerilatedContext> ctx;
  std::unique_ptr<Vvdla_top> top;
#ifdef VH_TRACE
  std::unique_ptr<VerilatedFstC> fst;
#endif
  uint8_t* mem = nullptr;
  uint64_t base = 0, size = 0;
  uint32_t rd_lat, wr_lat, gap;
  uint64_t cycle = 0, start_cycle = 0;
  std::deque<Burst> reads, writes, resps;
  uint32_t r_beat = 0, w_beat = 0;
  uint64_t r_free = 0, w_free = 0;
  bool trace_on = false;
  std::vector<uint64_t> trace;  // (cycle - start_cycle) << 8 | trace_o
  uint64_t bad_addr = 0;
  bool bad = false;

  bool in_range(uint64_t addr, uint64_t n) {
    bool ok = addr >= base && addr + n <= base + size;
    if (!ok && !bad) {
      bad = true;
      bad_addr = addr;
    }
    return ok;
  }

  // Drive the inputs of the current cycle from the DRAM model state.
  void drive() {
    Vvdla_top& t = *top;
    t.m_axi_arready = 1;
    t.m_axi_awready = 1;
    bool rv = !reads.empty() && cycle >= reads.front().ready && cycle >= r_free;
    t.m_axi_rvalid = rv;
    if (rv) {
      const Burst& b = reads.front();
      uint64_t a = b.addr + uint64_t(r_beat) * kBusBytes;
      static const uint8_t zeros[kBusBytes] = {};
      beat_in(t.m_axi_rdata, b.err ? zeros : mem + (a - base));
      t.m_axi_rid = b.id;
      t.m_axi_rresp = b.err ? 2 : 0;
      t.m_axi_rlast = r_beat + 1 == b.beats;
    }
    t.m_axi_wready = !writes.empty() && cycle >= w_free;
    bool bv = !resps.empty() && cycle >= resps.front().ready;
    t.m_axi_bvalid = bv;
    t.m_axi_bresp = bv && resps.front().err ? 2 : 0;
    t.m_axi_bid = 0;
  }

  // Apply the handshakes of the current cycle to the DRAM model (before the clock edge).
  void accept() {
    Vvdla_top& t = *top;
    if (t.m_axi_arvalid) {
      uint32_t beats = uint32_t(t.m_axi_arlen) + 1;
      uint64_t addr = t.m_axi_araddr;
      reads.push_back({addr, beats, uint32_t(t.m_axi_arid), cycle + rd_lat,
                       !in_range(addr, uint64_t(beats) * kBusBytes)});
    }
    if (t.m_axi_rvalid) {
      if (++r_beat == reads.front().beats) {
        reads.pop_front();
        r_beat = 0;
        r_free = cycle + 1 + gap;
      }
    }
    if (t.m_axi_awvalid) {
      uint32_t beats = uint32_t(t.m_axi_awlen) + 1;
      uint64_t addr = t.m_axi_awaddr;
      writes.push_back({addr, beats, 0, 0, !in_range(addr, uint64_t(beats) * kBusBytes)});
    }
    if (t.m_axi_wvalid && t.m_axi_wready) {
      Burst& b = writes.front();
      if (!b.err) beat_out(t.m_axi_wdata, mem + (b.addr - base + uint64_t(w_beat) * kBusBytes));
      if (++w_beat == b.beats) {
        resps.push_back({0, 0, 0, cycle + wr_lat, b.err});
        writes.pop_front();
        w_beat = 0;
        w_free = cycle + 1 + gap;
      }
    }
    if (t.m_axi_bvalid) resps.pop_front();
  }

  bool stopped() const { return ctx->gotFinish(); }

  void tick() {
    top->clk_i = 0;
    drive();
    top->eval();
#ifdef VH_TRACE
    if (fst) fst->dump(2 * cycle);
#endif
    if (trace_on && top->trace_o) trace.push_back((cycle - start_cycle) << 8 | top->trace_o);
    accept();
    top->clk_i = 1;
    top->eval();
#ifdef VH_TRACE
    if (fst) fst->dump(2 * cycle + 1);
#endif
    ++cycle;
  }

  void reset() {
    ctx->gotError(false);
    ctx->gotFinish(false);
    g_stops.erase(ctx.get());
    reads.clear();
    writes.clear();
    resps.clear();
    r_beat = w_beat = 0;
    top->rst_ni = 0;
    top->s_axil_awvalid = top->s_axil_wvalid = top->s_axil_arvalid = 0;
    top->s_axil_bready = top->s_axil_rready = 1;
    for (int i = 0; i < 4; ++i) tick();
    top->rst_ni = 1;
    tick();
    r_free = w_free = cycle;
  }

  void write_reg(uint32_t addr, uint32_t data) {
    Vvdla_top& t = *top;
    t.s_axil_awaddr = addr;
    t.s_axil_wdata = data;
    t.s_axil_wstrb = 0xF;
    t.s_axil_awvalid = t.s_axil_wvalid = 1;
    for (;;) {
      top->clk_i = 0;
      drive();
      top->eval();
      bool done = t.s_axil_awready;
      accept();
      top->clk_i = 1;
      top->eval();
      ++cycle;
      if (done || stopped()) break;
    }
    t.s_axil_awvalid = t.s_axil_wvalid = 0;
    start_cycle = cycle;  // the cycle after the write's edge: when a START takes effect
    while (!t.s_axil_bvalid && !stopped()) tick();
    tick();
  }

  uint32_t read_reg(uint32_t addr) {
    Vvdla_top& t = *top;
    t.s_axil_araddr = addr;
    t.s_axil_arvalid = 1;
    for (;;) {
      top->clk_i = 0;
      drive();
      top->eval();
      bool done = t.s_axil_arready;
      accept();
      top->clk_i = 1;
      top->eval();
      ++cycle;
      if (done || stopped()) break;
    }
    t.s_axil_arvalid = 0;
    while (!t.s_axil_rvalid && !stopped()) tick();
    uint32_t v = t.s_axil_rdata;
    tick();
    return v;
  }
};

}  // namespace

extern "C" {

void* vh_create(uint32_t rd_lat, uint32_t wr_lat, uint32_t gap, const char* fst_path) {
  auto* h = new Harness();
  h->ctx = std::make_unique<VerilatedContext>();
  h->top = std::make_unique<Vvdla_top>(h->ctx.get(), "top");
  h->rd_lat = rd_lat;
  h->wr_lat = wr_lat;
  h->gap = gap;
#ifdef VH_TRACE
  if (fst_path && *fst_path) {
    h->ctx->traceEverOn(true);
    h->fst = std::make_unique<VerilatedFstC>();
    h->top->trace(h->fst.get(), 99);
    h->fst->open(fst_path);
  }
#else
  (void)fst_path;
#endif
  h->reset();
  return h;
}

void vh_destroy(void* p) {
  auto* h = static_cast<Harness*>(p);
#ifdef VH_TRACE
  if (h->fst) h->fst->close();
#endif
  h->top->final();
  g_stops.erase(h->ctx.get());
  delete h;
}

// Whether the model was built with the RTL's assertions (--assert).
int vh_assertions() { return VH_ASSERTIONS; }

int vh_traced() {
#ifdef VH_TRACE
  return 1;
#else
  return 0;
#endif
}

void vh_set_memory(void* p, uint8_t* mem, uint64_t base, uint64_t size) {
  auto* h = static_cast<Harness*>(p);
  h->mem = mem;
  h->base = base;
  h->size = size;
  h->bad = false;
}

void vh_reset(void* p) { static_cast<Harness*>(p)->reset(); }

void vh_write(void* p, uint32_t addr, uint32_t data) { static_cast<Harness*>(p)->write_reg(addr, data); }

uint32_t vh_read(void* p, uint32_t addr) { return static_cast<Harness*>(p)->read_reg(addr); }

// Clock until the interrupt line rises or `max_cycles` cycles pass; returns 1 on the interrupt, 2 when
// the model stopped (a failed assertion: see vh_stopped), 0 otherwise.
int vh_run(void* p, uint64_t max_cycles) {
  auto* h = static_cast<Harness*>(p);
  for (uint64_t i = 0; i < max_cycles; ++i) {
    h->tick();
    if (h->top->irq_o) return 1;
    if (h->stopped()) return 2;
  }
  return 0;
}

// Whether the model has stopped on a failed assertion or $stop; copies "file:line" of the first one
// (NUL-terminated, truncated to `size`) into `where`.
int vh_stopped(void* p, char* where, uint64_t size) {
  auto* h = static_cast<Harness*>(p);
  if (!h->stopped()) return 0;
  if (size) {
    auto it = g_stops.find(h->ctx.get());
    std::strncpy(where, it == g_stops.end() ? "" : it->second.c_str(), size - 1);
    where[size - 1] = 0;
  }
  return 1;
}

uint64_t vh_cycle(void* p) { return static_cast<Harness*>(p)->cycle - static_cast<Harness*>(p)->start_cycle; }

void vh_trace_enable(void* p, int on) {
  auto* h = static_cast<Harness*>(p);
  h->trace_on = on != 0;
  h->trace.clear();
}

uint64_t vh_trace_len(void* p) { return static_cast<Harness*>(p)->trace.size(); }

void vh_trace_copy(void* p, uint64_t* out) {
  auto* h = static_cast<Harness*>(p);
  std::memcpy(out, h->trace.data(), h->trace.size() * sizeof(uint64_t));
}

int vh_bad_access(void* p, uint64_t* addr) {
  auto* h = static_cast<Harness*>(p);
  *addr = h->bad_addr;
  return h->bad;
}

}  // extern "C"
