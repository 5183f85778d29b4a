// The two LZ4 entry points Verilator's FST writer uses, for machines without the lz4 development
// package. It emits a valid LZ4 block that holds the input as literals (no compression): any FST
// reader decodes it; the waveform files are just larger.
#ifndef VDLA_LZ4_LITERALS_H
#define VDLA_LZ4_LITERALS_H

#include <cstring>

static inline int LZ4_compressBound(int n) { return n + n / 255 + 16; }

static inline int LZ4_compress_default(const char* src, char* dst, int n, int capacity) {
  if (n < 0 || capacity < LZ4_compressBound(n)) return 0;
  unsigned char* out = reinterpret_cast<unsigned char*>(dst);
  int rest = n - 15;
  *out++ = static_cast<unsigned char>((n < 15 ? n : 15) << 4);  // one sequence: literals only
  if (rest >= 0) {
    for (; rest >= 255; rest -= 255) *out++ = 255;
    *out++ = static_cast<unsigned char>(rest);
  }
  std::memcpy(out, src, static_cast<size_t>(n));
  return static_cast<int>(out + n - reinterpret_cast<unsigned char*>(dst));
}

#endif
