// Driver of tb_queues.sv: `tb_queues SCENARIO` runs one scenario and exits 0 when no assertion failed,
// 3 when one did (Verilator prints which). Scenarios: ok (fill and drain both queues legally),
// token_overflow, token_underflow, fifo_overflow, fifo_underflow.
#include <cstdio>
#include <cstring>
#include <memory>

#include "Vtb_queues.h"
#include "verilated.h"

namespace {

struct Step {
  int tq_push, tq_pop, ff_push, ff_pop;
};

}  // namespace

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "ok";
  auto ctx = std::make_unique<VerilatedContext>();
  ctx->fatalOnError(false);  // a failed assertion is reported and ends the run, it does not abort
  auto top = std::make_unique<Vtb_queues>(ctx.get(), "top");

  // legal traffic: fill both (two deep), drain both
  Step steps[16] = {{1, 0, 1, 0}, {1, 0, 1, 0}, {0, 1, 0, 1}, {0, 1, 0, 1}};
  int n = 4;
  if (!std::strcmp(scenario, "token_overflow")) {
    steps[2] = {1, 0, 0, 0};  // a third push into the full token queue
    n = 3;
  } else if (!std::strcmp(scenario, "token_underflow")) {
    steps[0] = {0, 1, 0, 0};  // a pop of the empty token queue
    n = 1;
  } else if (!std::strcmp(scenario, "fifo_overflow")) {
    steps[2] = {0, 0, 1, 0};
    n = 3;
  } else if (!std::strcmp(scenario, "fifo_underflow")) {
    steps[0] = {0, 0, 0, 1};
    n = 1;
  } else if (std::strcmp(scenario, "ok")) {
    std::fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }

  auto tick = [&]() {
    top->clk_i = 0;
    top->eval();
    top->clk_i = 1;
    top->eval();
  };
  top->rst_ni = 0;
  for (int i = 0; i < 2; ++i) tick();
  top->rst_ni = 1;
  tick();
  for (int i = 0; i < n && !ctx->gotError(); ++i) {
    top->tq_push_i = steps[i].tq_push;
    top->tq_pop_i = steps[i].tq_pop;
    top->ff_push_i = steps[i].ff_push;
    top->ff_pop_i = steps[i].ff_pop;
    top->ff_data_i = i;
    tick();
  }
  top->tq_push_i = top->tq_pop_i = top->ff_push_i = top->ff_pop_i = 0;
  tick();
  top->final();
  std::printf("scenario %s: %s\n", scenario, ctx->gotError() ? "assertion failed" : "clean");
  return ctx->gotError() ? 3 : 0;
}
