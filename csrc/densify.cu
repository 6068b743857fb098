// The default densification strategy's running sums, in one launch per step:
// for each Gaussian n and camera c where it is visible (both radii > 0),
//   grad2d[n] += |(v_means2d.x * sx, v_means2d.y * sy)|  and  count[n] += 1,
// with sx, sy = width / 2 * C, height / 2 * C (the gradient in normalised device units).
// With a gate (gate.cuh) nothing is added on a step the trainer skips.
#include <cuda_runtime.h>

#include <cstdint>

#include "gate.cuh"
#include "launch.h"

namespace gsnb {
namespace {

constexpr int kThreads = 256;

__global__ void accumulate_grad2d_kernel(
    int num_cams, int64_t n, const float2* __restrict__ grads, const int2* __restrict__ radii,
    float sx, float sy, float* __restrict__ grad2d, float* __restrict__ count,
    const double* __restrict__ gate) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= n || !gate_open(gate)) return;
  float norm = 0.f, seen = 0.f;
  for (int c = 0; c < num_cams; ++c) {
    const int64_t at = c * n + g;
    const int2 r = radii[at];
    if (r.x > 0 && r.y > 0) {
      const float2 v = grads[at];
      norm += sqrtf(v.x * sx * v.x * sx + v.y * sy * v.y * sy);
      seen += 1.f;
    }
  }
  if (seen > 0.f) {
    grad2d[g] += norm;
    count[g] += seen;
  }
}

}  // namespace

void launch_accumulate_grad2d(int64_t num_cams, int64_t n, const float* grads, const int* radii,
                              double sx, double sy, float* grad2d, float* count,
                              const double* gate, cudaStream_t stream) {
  accumulate_grad2d_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      static_cast<int>(num_cams), n, reinterpret_cast<const float2*>(grads),
      reinterpret_cast<const int2*>(radii), static_cast<float>(sx), static_cast<float>(sy),
      grad2d, count, gate);
}

}  // namespace gsnb
