// Host-side helpers of the entry points: the one input check (launch sizes: launch.h).
// Included after `#define TORCH_ASSERT_ONLY_METHOD_OPERATORS`: the light ATen headers only.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <cstdint>
#include <string>

namespace gsnb {

// The name Python gives a dtype in messages (float32, not Float).
inline std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kByte: return "uint8";
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
