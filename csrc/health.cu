// The sums behind the trainer's health signals, in one pass over the Gaussians.
// Rows of log-scales [N, 3] and opacity logits [N] give the largest log-scale per Gaussian
// ("top", summed shifted by row 0's so that the variance keeps its digits), the log of
// largest / smallest scale, and the mean opacity; every parameter tensor is scanned for
// NaN and Inf, and the gradients give their sum of squares (the gradient norm) and their
// NaN/Inf count. Accumulated in float64: per block, then the blocks in a fixed order.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>

#include "host.h"
#include "ops.h"
#include "reduce.cuh"

namespace gsnb {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTensors = 8;

struct TensorList {
  const float* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  int count;
};

enum Slot {
  kNonFinite,
  kTopMax,
  kTopSum,
  kTopSq,
  kRatioSum,
  kRatioMax,
  kOpacitySum,
  kGradSq,
  kGradNonFinite,
  kSlots
};

__host__ __device__ constexpr bool is_max_slot(int s) { return s == kTopMax || s == kRatioMax; }

// Folds two partials of slot s: the maxima by fmax, the rest by addition.
__device__ __forceinline__ double combine(int s, double a, double b) {
  return is_max_slot(s) ? fmax(a, b) : a + b;
}

__global__ void health_kernel(
    const float* __restrict__ scales, const float* __restrict__ opacities, int64_t n,
    TensorList params, TensorList grads, double* __restrict__ block_out) {
  // Per thread: the shifted top sums, ratio sum, opacity sum, two maxima, non-finite count.
  double top_sum = 0.0, top_sq = 0.0, ratio_sum = 0.0, opacity_sum = 0.0;
  double top_max = -INFINITY, ratio_max = -INFINITY, bad = 0.0;
  const float ref = fmaxf(fmaxf(scales[0], scales[1]), scales[2]);
  const double shift = isfinite(ref) ? ref : 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float a = scales[3 * i], b = scales[3 * i + 1], c = scales[3 * i + 2];
    // fmaxf and fminf drop NaN; a NaN scale must reach the sums instead.
    const bool nan = isnan(a) || isnan(b) || isnan(c);
    const float top = nan ? NAN : fmaxf(fmaxf(a, b), c);
    const float ratio = nan ? NAN : top - fminf(fminf(a, b), c);
    const double d = static_cast<double>(top) - shift;
    top_sum += d;
    top_sq += d * d;
    ratio_sum += ratio;
    top_max = fmax(top_max, static_cast<double>(top));
    ratio_max = fmax(ratio_max, static_cast<double>(ratio));
    opacity_sum += 1.0 / (1.0 + exp(-static_cast<double>(opacities[i])));
  }
  for (int t = 0; t < params.count; ++t) {
    const float* p = params.ptr[t];
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         i < params.numel[t]; i += stride) {
      bad += isfinite(p[i]) ? 0.0 : 1.0;
    }
  }
  double grad_sq = 0.0, grad_bad = 0.0;
  for (int t = 0; t < grads.count; ++t) {
    const float* g = grads.ptr[t];
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         i < grads.numel[t]; i += stride) {
      const float v = g[i];
      if (isfinite(v)) {
        grad_sq += static_cast<double>(v) * v;
      } else {
        grad_bad += 1.0;
      }
    }
  }
  __shared__ double partial[kSlots][kThreads / kWarpSize];
  const double mine[kSlots] = {bad,       top_max,     top_sum, top_sq,  ratio_sum,
                               ratio_max, opacity_sum, grad_sq, grad_bad};
  const double v = block_reduce<kThreads>(
      mine, partial, threadIdx.x, [](int s, double a, double b) { return combine(s, a, b); });
  if (threadIdx.x < kSlots) block_out[blockIdx.x * kSlots + threadIdx.x] = v;
}

// One warp per slot folds the blocks' partials: lanes stride over the blocks, then a
// shuffle tree; the order is fixed, so the result is deterministic.
__global__ void health_finish_kernel(const double* __restrict__ block_out, int blocks,
                                     double* __restrict__ out) {
  const int s = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (s >= kSlots) return;
  const double v =
      fold_blocks(block_out, blocks, kSlots, s, lane, is_max_slot(s) ? -INFINITY : 0.0,
                  [s](double a, double b) { return combine(s, a, b); });
  if (lane == 0) out[s] = v;
}

// Pointers and sizes of up to kMaxTensors contiguous float32 tensors on `device`.
TensorList make_list(const std::vector<at::Tensor>& tensors, const at::Device& device,
                     const char* what) {
  TORCH_CHECK(static_cast<int64_t>(tensors.size()) <= kMaxTensors, "health_sums: at most ",
              kMaxTensors, " ", what, " tensors");
  TensorList list{};
  list.count = static_cast<int>(tensors.size());
  for (int t = 0; t < list.count; ++t) {
    const at::Tensor& p = tensors[t];
    check_input(p, device, "health_sums", what, at::kFloat, t);
    list.ptr[t] = p.data_ptr<float>();
    list.numel[t] = p.numel();
  }
  return list;
}

}  // namespace

at::Tensor health_sums(const at::Tensor& scales, const at::Tensor& opacities,
                       const std::vector<at::Tensor>& params,
                       const std::vector<at::Tensor>& grads) {
  check_input(scales, scales.device(), "health_sums", "scales");
  TORCH_CHECK(scales.dim() == 2 && scales.size(1) == 3, "health_sums: scales must be [N, 3], got ",
              scales.sizes());
  const int64_t n = scales.size(0);
  check_input(opacities, scales.device(), "health_sums", "opacities");
  TORCH_CHECK(opacities.numel() == n, "health_sums: opacities must be [N] with N = ", n, ", got ",
              opacities.sizes());
  const at::cuda::CUDAGuard guard(scales.device());
  const TensorList list = make_list(params, scales.device(), "parameter");
  const TensorList grad_list = make_list(grads, scales.device(), "gradient");
  TORCH_CHECK(n > 0, "health_sums: no Gaussians");
  int64_t most = n;
  for (const TensorList* l : {&list, &grad_list})
    for (int t = 0; t < l->count; ++t) most = std::max(most, l->numel[t] / 8);
  const int blocks = blocks_for(most, kThreads, 512);
  auto options = scales.options().dtype(at::kDouble);
  auto block_out = at::empty({blocks, kSlots}, options);
  auto out = at::empty({kSlots}, options);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  health_kernel<<<blocks, kThreads, 0, stream>>>(scales.data_ptr<float>(),
                                                 opacities.data_ptr<float>(), n, list, grad_list,
                                                 block_out.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  health_finish_kernel<<<1, 32 * kSlots, 0, stream>>>(block_out.data_ptr<double>(), blocks,
                                             out.data_ptr<double>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace gsnb
