// Host-side helpers of the entry points: launch sizes and the one input check.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace gsnb {

// ceil(n / d) for n >= 0 and d > 0: the tiles over an image side, the blocks over n items.
constexpr int64_t div_up(int64_t n, int64_t d) { return (n + d - 1) / d; }

// Blocks of `threads` threads, one thread per item, covering n items; at most `cap` blocks,
// for kernels that stride over the items past the grid.
inline int blocks_for(int64_t n, int threads,
                      int64_t cap = std::numeric_limits<int>::max()) {
  return static_cast<int>(std::min(div_up(n, threads), cap));
}

// The name Python gives a dtype in messages (float32, not Float).
inline std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(dtype);
  }
}

// Throws unless t is a contiguous tensor of `dtype` (float32 unless told) on `device`, a
// CUDA device. `who` names the entry point and `what` the argument (`what index` for one of
// a list) in the message. The message is formatted only on failure: this runs every step.
inline void check_input(const at::Tensor& t, const at::Device& device, const char* who,
                        const char* what, at::ScalarType dtype = at::kFloat,
                        int64_t index = -1) {
  if (device.is_cuda() && t.defined() && t.device() == device && t.scalar_type() == dtype &&
      t.is_contiguous())
    return;
  const std::string name = index >= 0 ? c10::str(what, " ", index) : std::string(what);
  const std::string wanted = device.is_cuda() ? c10::str(device) : "a CUDA device";
  const std::string got = t.defined() ? c10::str("a ", t.is_contiguous() ? "" : "non-contiguous ",
                                                 dtype_name(t.scalar_type()), " tensor on ",
                                                 t.device())
                                      : "no tensor";
  TORCH_CHECK(false, who, ": ", name, " must be a contiguous ", dtype_name(dtype), " tensor on ",
              wanted, ", got ", got);
}

}  // namespace gsnb
