// The sums behind the trainer's health signals, in one pass over the Gaussians.
// Rows of log-scales [N, 3] and opacity logits [N] give the largest log-scale per Gaussian
// ("top", summed shifted by row 0's so that the variance keeps its digits), the log of
// largest / smallest scale, and the mean opacity; every parameter tensor is scanned for
// NaN and Inf, and the gradients give their sum of squares (the gradient norm) and their
// NaN/Inf count. Accumulated in float64: per block, then the blocks in a fixed order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace gsnb {
namespace {

constexpr int kThreads = 256;

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
static_assert(kSlots == kHealthSlots, "launch.h counts the slots for the host");

__host__ __device__ constexpr bool is_max_slot(int s) { return s == kTopMax || s == kRatioMax; }

// Folds two partials of slot s: the maxima by fmax, the rest by addition.
__device__ __forceinline__ double combine(int s, double a, double b) {
  return is_max_slot(s) ? fmax(a, b) : a + b;
}

// f(v) for the n values at p, thread `first` of a grid of `stride` threads taking every
// stride-th one: four at a time through float4 loads where p is aligned16, so that more
// loads are in flight per thread.
template <typename F>
__device__ __forceinline__ void for_each_value(const float* __restrict__ p, int64_t n,
                                               int64_t first, int64_t stride, F&& f) {
  int64_t done = 0;
  if (aligned16(p)) {
    const float4* p4 = reinterpret_cast<const float4*>(p);
    const int64_t n4 = n / 4;
#pragma unroll 4
    for (int64_t i = first; i < n4; i += stride) {
      const float4 v = p4[i];
      f(v.x);
      f(v.y);
      f(v.z);
      f(v.w);
    }
    done = n4 * 4;
  }
  for (int64_t i = done + first; i < n; i += stride) f(p[i]);
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
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) {
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
  for (int t = 0; t < params.count; ++t)
    for_each_value(params.ptr[t], params.numel[t], first, stride,
                   [&](float v) { bad += isfinite(v) ? 0.0 : 1.0; });
  double grad_sq = 0.0, grad_bad = 0.0;
  for (int t = 0; t < grads.count; ++t)
    for_each_value(grads.ptr[t], grads.numel[t], first, stride, [&](float v) {
      if (isfinite(v)) {
        grad_sq += static_cast<double>(v) * v;
      } else {
        grad_bad += 1.0;
      }
    });
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

}  // namespace

int health_blocks(int64_t most) { return blocks_for(most, kThreads, 1024); }

void launch_health(int blocks, const float* scales, const float* opacities, int64_t n,
                   const TensorList& params, const TensorList& grads, double* block_out,
                   cudaStream_t stream) {
  health_kernel<<<blocks, kThreads, 0, stream>>>(scales, opacities, n, params, grads, block_out);
}

void launch_health_finish(const double* block_out, int blocks, double* out,
                          cudaStream_t stream) {
  health_finish_kernel<<<1, 32 * kSlots, 0, stream>>>(block_out, blocks, out);
}

}  // namespace gsnb
