// Adam over several parameter tensors, each with its own learning rate, in one launch.
// The same update as torch.optim.Adam (no weight decay, no amsgrad) in float32:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= step_size * m / (sqrt(v) / bias2_sqrt + eps),  step_size = lr / (1 - b1^t)
// with the bias corrections worked out on the host per tensor (train_ops.cpp). With a gate
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

// one_minus_beta1/2 come from the host in double: 1.f - 0.999f is off by 1.3e-5 relative.
__global__ void adam_kernel(AdamTensors list, float beta1, float one_minus_beta1, float beta2,
                            float one_minus_beta2, float eps, const double* gate) {
  if (!gate_open(gate)) return;
  const AdamTensor& a = list.t[blockIdx.y];
  const AdamUpdate up{beta1, one_minus_beta1, beta2, one_minus_beta2, eps, a.step_size,
                      a.bias2_sqrt};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t done = 0;
  // Four values at a time through float4 loads and stores where all four arrays allow it,
  // the rest one by one.
  if (aligned16(a.param) && aligned16(a.grad) && aligned16(a.exp_avg) &&
      aligned16(a.exp_avg_sq)) {
    float4* p4 = reinterpret_cast<float4*>(a.param);
    const float4* g4 = reinterpret_cast<const float4*>(a.grad);
    float4* m4 = reinterpret_cast<float4*>(a.exp_avg);
    float4* v4 = reinterpret_cast<float4*>(a.exp_avg_sq);
    const int64_t n4 = a.numel / 4;
    for (int64_t i = first; i < n4; i += stride) {
      float4 p = p4[i], m = m4[i], v = v4[i];
      const float4 g = g4[i];
      up(p.x, g.x, m.x, v.x);
      up(p.y, g.y, m.y, v.y);
      up(p.z, g.z, m.z, v.z);
      up(p.w, g.w, m.w, v.w);
      p4[i] = p;
      m4[i] = m;
      v4[i] = v;
    }
    done = n4 * 4;
  }
  for (int64_t i = done + first; i < a.numel; i += stride)
    up(a.param[i], a.grad[i], a.exp_avg[i], a.exp_avg_sq[i]);
}

}  // namespace

void launch_adam(const AdamTensors& list, int64_t count, int64_t most, double beta1,
                 double beta2, double eps, const double* gate, cudaStream_t stream) {
  const dim3 grid(blocks_for(most, kThreads, 1024), static_cast<unsigned>(count));
  adam_kernel<<<grid, kThreads, 0, stream>>>(
      list, static_cast<float>(beta1), static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
      static_cast<float>(1.0 - beta2), static_cast<float>(eps), gate);
}

}  // namespace gsnb
