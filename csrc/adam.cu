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

#include "gate.cuh"
#include "launch.h"

namespace gsnb {
namespace {

constexpr int kThreads = 512;

// one_minus_beta1/2 come from the host in double: 1.f - 0.999f is off by 1.3e-5 relative.
__global__ void adam_kernel(AdamTensors list, float beta1, float one_minus_beta1, float beta2,
                            float one_minus_beta2, float eps, const double* gate) {
  if (!gate_open(gate)) return;
  const AdamTensor& a = list.t[blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.numel;
       i += stride) {
    const float g = a.grad[i];
    const float m = beta1 * a.exp_avg[i] + one_minus_beta1 * g;
    const float v = beta2 * a.exp_avg_sq[i] + one_minus_beta2 * g * g;
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    a.param[i] -= a.step_size * m / (sqrtf(v) / a.bias2_sqrt + eps);
  }
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
