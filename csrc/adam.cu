// Adam over several parameter tensors, each with its own learning rate, in one launch.
// The same update as torch.optim.Adam (no weight decay, no amsgrad) in float32:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= step_size * m / (sqrt(v) / bias2_sqrt + eps),  step_size = lr / (1 - b1^t)
// with the bias corrections worked out on the host per tensor (train_ops.cpp); a tensor may
// ask for the leading values of each row only (AdamTensor). With a gate
// (float64 on the device: the gradients' sum of squares, their count of non-finite values,
// the loss) the kernel updates nothing unless the sum fits a float32, the count is 0 and the
// loss is finite: a training step launches its update before it reads its numbers back, and
// a non-finite step still changes nothing.
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "gate.cuh"
#include "launch.h"

namespace gsnb {
namespace {

constexpr int kThreads = 512;

// One value's update, in place.
struct AdamUpdate {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps, step_size, bias2_sqrt;

  __device__ __forceinline__ void operator()(float& p, float g, float& m, float& v) const {
    m = beta1 * m + one_minus_beta1 * g;
    v = beta2 * v + one_minus_beta2 * g * g;
    p -= step_size * m / (sqrtf(v) / bias2_sqrt + eps);
  }
};

// The units of work of one tensor, a thread each: float4s and then the values past them
// where all four arrays are 16-byte aligned, else single values; with leading values only,
// each of those.
__host__ __device__ inline int64_t adam_units(const AdamTensor& a, bool vec) {
  if (a.active_values < a.row_values) return a.numel / a.row_values * a.active_values;
  const int64_t n4 = vec ? a.numel / 4 : 0;
  return n4 + (a.numel - 4 * n4);
}

__host__ __device__ inline bool all_aligned16(const AdamTensor& a) {
  const auto bits = [](const void* p) { return reinterpret_cast<uintptr_t>(p) & 15u; };
  return (bits(a.param) | bits(a.grad) | bits(a.exp_avg) | bits(a.exp_avg_sq)) == 0;
}

// One thread per unit of work over all tensors: a block belongs to the tensor whose range of
// blocks (first_block) holds it, so that no block waits on another tensor's size.
// one_minus_beta1/2 come from the host in double: 1.f - 0.999f is off by 1.3e-5 relative.
__global__ void __launch_bounds__(kThreads) adam_kernel(
    AdamTensors list, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
    float eps, const double* gate) {
  if (!gate_open(gate)) return;
  int t = 0;
  while (t + 1 < list.count && static_cast<int>(blockIdx.x) >= list.first_block[t + 1]) ++t;
  const AdamTensor& a = list.t[t];
  const AdamUpdate up{beta1, one_minus_beta1, beta2, one_minus_beta2, eps, a.step_size,
                      a.bias2_sqrt};
  const int64_t u =
      static_cast<int64_t>(blockIdx.x - list.first_block[t]) * blockDim.x + threadIdx.x;
  if (a.active_values < a.row_values) {  // the leading values of each row only
    if (u >= adam_units(a, false)) return;
    const int64_t r = u / a.active_values;
    const int64_t at = r * a.row_values + (u - r * a.active_values);
    up(a.param[at], a.grad[at], a.exp_avg[at], a.exp_avg_sq[at]);
    return;
  }
  const bool vec = all_aligned16(a);
  const int64_t n4 = vec ? a.numel / 4 : 0;
  if (u < n4) {
    float4* p4 = reinterpret_cast<float4*>(a.param);
    float4* m4 = reinterpret_cast<float4*>(a.exp_avg);
    float4* v4 = reinterpret_cast<float4*>(a.exp_avg_sq);
    float4 p = p4[u], m = m4[u], v = v4[u];
    const float4 g = reinterpret_cast<const float4*>(a.grad)[u];
    up(p.x, g.x, m.x, v.x);
    up(p.y, g.y, m.y, v.y);
    up(p.z, g.z, m.z, v.z);
    up(p.w, g.w, m.w, v.w);
    p4[u] = p;
    m4[u] = m;
    v4[u] = v;
    return;
  }
  const int64_t at = 4 * n4 + (u - n4);
  if (at < a.numel) up(a.param[at], a.grad[at], a.exp_avg[at], a.exp_avg_sq[at]);
}

}  // namespace

void launch_adam(const AdamTensors& list, int64_t count, double beta1, double beta2,
                 double eps, const double* gate, cudaStream_t stream) {
  AdamTensors blocks = list;
  blocks.count = static_cast<int>(count);
  int64_t total = 0;
  for (int t = 0; t < blocks.count; ++t) {
    blocks.first_block[t] = static_cast<int>(total);
    const AdamTensor& a = blocks.t[t];
    const bool vec = a.active_values < a.row_values ? false : all_aligned16(a);
    total += div_up(adam_units(a, vec), kThreads);
  }
  blocks.first_block[blocks.count] = static_cast<int>(total);
  if (total == 0) return;
  adam_kernel<<<static_cast<unsigned>(total), kThreads, 0, stream>>>(
      blocks, static_cast<float>(beta1), static_cast<float>(1.0 - beta1),
      static_cast<float>(beta2), static_cast<float>(1.0 - beta2), static_cast<float>(eps), gate);
}

}  // namespace gsnb
