// Adam over several parameter tensors, each with its own learning rate, in one launch.
// The same update as torch.optim.Adam (no weight decay, no amsgrad) in float32:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= step_size * m / (sqrt(v) / bias2_sqrt + eps),  step_size = lr / (1 - b1^t)
// with the bias corrections worked out on the host per tensor.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host.h"
#include "ops.h"

namespace gsnb {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxTensors = 8;

struct AdamTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t numel;
  float step_size;
  float bias2_sqrt;
};

struct AdamTensors {
  AdamTensor t[kMaxTensors];
};

// one_minus_beta1/2 come from the host in double: 1.f - 0.999f is off by 1.3e-5 relative.
__global__ void adam_kernel(AdamTensors list, float beta1, float one_minus_beta1, float beta2,
                            float one_minus_beta2, float eps) {
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

// t is a contiguous float32 tensor on `device` with `numel` values.
void check_entry(const at::Tensor& t, const at::Device& device, int64_t numel, const char* what,
                 int64_t i) {
  check_input(t, device, "adam_step", what, at::kFloat, i);
  TORCH_CHECK(t.numel() == numel, "adam_step: ", what, " ", i, " has ", t.numel(),
              " values, its parameter ", numel);
}

}  // namespace

void adam_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
               const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
               const std::vector<double>& step_sizes, const std::vector<double>& bias2_sqrts,
               double beta1, double beta2, double eps) {
  const size_t count = params.size();
  TORCH_CHECK(count <= kMaxTensors, "adam_step: at most ", kMaxTensors, " tensors, got ", count);
  TORCH_CHECK(grads.size() == count && exp_avgs.size() == count && exp_avg_sqs.size() == count &&
                  step_sizes.size() == count && bias2_sqrts.size() == count,
              "adam_step: the lists differ in length");
  if (count == 0) return;
  check_input(params[0], params[0].device(), "adam_step", "parameter", at::kFloat, 0);
  const at::cuda::CUDAGuard guard(params[0].device());
  AdamTensors list{};
  int64_t most = 0;
  const at::Device device = params[0].device();
  for (size_t i = 0; i < count; ++i) {
    const int64_t numel = params[i].numel(), at = static_cast<int64_t>(i);
    check_entry(params[i], device, numel, "parameter", at);
    check_entry(grads[i], device, numel, "gradient", at);
    check_entry(exp_avgs[i], device, numel, "exp_avg", at);
    check_entry(exp_avg_sqs[i], device, numel, "exp_avg_sq", at);
    list.t[i] = AdamTensor{params[i].data_ptr<float>(),  grads[i].data_ptr<float>(),
                           exp_avgs[i].data_ptr<float>(), exp_avg_sqs[i].data_ptr<float>(),
                           params[i].numel(),             static_cast<float>(step_sizes[i]),
                           static_cast<float>(bias2_sqrts[i])};
    most = std::max(most, params[i].numel());
  }
  if (most == 0) return;
  const dim3 grid(blocks_for(most, kThreads, 1024), static_cast<unsigned>(count));
  adam_kernel<<<grid, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      list, static_cast<float>(beta1), static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
      static_cast<float>(1.0 - beta2), static_cast<float>(eps));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace gsnb
