// The default densification strategy's running sums, in one launch per step:
// for each Gaussian n and camera c where it is visible (both radii > 0),
//   grad2d[n] += |(v_means2d.x * sx, v_means2d.y * sy)|  and  count[n] += 1,
// with sx, sy = width / 2 * C, height / 2 * C (the gradient in normalised device units).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host.h"
#include "ops.h"

namespace gsnb {
namespace {

constexpr int kThreads = 256;

__global__ void accumulate_grad2d_kernel(
    int num_cams, int64_t n, const float2* __restrict__ grads, const int2* __restrict__ radii,
    float sx, float sy, float* __restrict__ grad2d, float* __restrict__ count) {
  const int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (g >= n) return;
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

void accumulate_grad2d(const at::Tensor& grads, const at::Tensor& radii, double sx, double sy,
                       at::Tensor& grad2d, at::Tensor& count) {
  const char* who = "accumulate_grad2d";
  check_input(grads, grads.device(), who, "grads");
  TORCH_CHECK(grads.dim() == 3 && grads.size(2) == 2,
              "accumulate_grad2d: grads must be [C, N, 2], got ", grads.sizes());
  check_input(radii, grads.device(), who, "radii", at::kInt);
  TORCH_CHECK(radii.sizes() == grads.sizes(),
              "accumulate_grad2d: radii must be [C, N, 2] like grads, got ", radii.sizes());
  const int64_t num_cams = grads.size(0), n = grads.size(1);
  for (const at::Tensor* t : {&grad2d, &count}) {
    check_input(*t, grads.device(), who, "a running sum");
    TORCH_CHECK(t->numel() == n, "accumulate_grad2d: the running sums must be [N] with N = ", n,
                ", got ", t->sizes());
  }
  if (n == 0 || num_cams == 0) return;
  const at::cuda::CUDAGuard guard(grads.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  accumulate_grad2d_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      static_cast<int>(num_cams), n, reinterpret_cast<const float2*>(grads.data_ptr<float>()),
      reinterpret_cast<const int2*>(radii.data_ptr<int>()), static_cast<float>(sx),
      static_cast<float>(sy), grad2d.data_ptr<float>(), count.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace gsnb
