// The sums behind the trainer's health signals, in one pass over the Gaussians.
// Rows of log-scales [N, 3] and opacity logits [N] give the largest log-scale per Gaussian
// ("top", summed shifted by row 0's so that the variance keeps its digits), the log of
// largest / smallest scale, and the mean opacity; every parameter tensor is scanned for
// NaN and Inf, and the gradients give their sum of squares (the gradient norm) and their
// NaN/Inf count. Accumulated in float64 (counts as integers): per thread, per block, then
// the blocks in a fixed order.
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

// The 16-byte aligned float4 runs of the parameters and then the gradients, as one index
// space, so that every thread streams its share of all of them with loads in flight (a
// loop per tensor left most threads idle on the small ones and waited once per tensor).
// Run r covers float4s [start[r], start[r + 1]); runs [0, params) are parameters.
struct Runs {
  const float4* ptr[2 * kMaxTensors];
  int64_t start[2 * kMaxTensors + 1];
  int count;
  int params;
};

// The values the runs leave (all of an unaligned tensor, an aligned one's last numel % 4),
// thread `first` of `stride` taking every stride-th.
template <typename F>
__device__ __forceinline__ void for_each_leftover(const float* __restrict__ p, int64_t n,
                                                  int64_t first, int64_t stride, F&& f) {
  const int64_t done = aligned16(p) ? n / 4 * 4 : 0;
  for (int64_t i = done + first; i < n; i += stride) f(p[i]);
}

__device__ __forceinline__ int non_finite4(const float4& v) {
  return !isfinite(v.x) + !isfinite(v.y) + !isfinite(v.z) + !isfinite(v.w);
}

__global__ void health_kernel(
    const float* __restrict__ scales, const float* __restrict__ opacities, int64_t n,
    TensorList params, TensorList grads, Runs runs, double* __restrict__ block_out) {
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
  int64_t bad_count = 0, grad_bad_count = 0;
  double grad_sq = 0.0;
  auto add_grad = [&](float v) {
    if (isfinite(v)) {
      grad_sq += static_cast<double>(v) * v;
    } else {
      ++grad_bad_count;
    }
  };
  // Four float4s a thread and round, all loaded before any is summed; a thread's indices
  // only grow, so its run only moves forward.
  const int64_t total = runs.start[runs.count];
  int r = 0;
  for (int64_t base = first; base < total; base += 4 * stride) {
    float4 v[4];
    int run[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t q = base + u * stride;
      run[u] = -1;
      if (q < total) {
        while (q >= runs.start[r + 1]) ++r;
        run[u] = r;
        v[u] = runs.ptr[r][q - runs.start[r]];
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (run[u] < 0) continue;
      if (run[u] < runs.params) {
        bad_count += non_finite4(v[u]);
      } else {
        add_grad(v[u].x);
        add_grad(v[u].y);
        add_grad(v[u].z);
        add_grad(v[u].w);
      }
    }
  }
  for (int t = 0; t < params.count; ++t)
    for_each_leftover(params.ptr[t], params.numel[t], first, stride,
                      [&](float x) { bad_count += !isfinite(x); });
  for (int t = 0; t < grads.count; ++t)
    for_each_leftover(grads.ptr[t], grads.numel[t], first, stride, add_grad);
  bad += static_cast<double>(bad_count);
  const double grad_bad = static_cast<double>(grad_bad_count);
  __shared__ double partial[kSlots][kThreads / kWarpSize];
  const double mine[kSlots] = {bad,       top_max,     top_sum, top_sq,  ratio_sum,
                               ratio_max, opacity_sum, grad_sq, grad_bad};
  const double v = block_reduce<kThreads>(
      mine, partial, threadIdx.x, [](int s, double a, double b) { return combine(s, a, b); });
  if (threadIdx.x < kSlots) block_out[blockIdx.x * kSlots + threadIdx.x] = v;
}

// One warp per slot folds the blocks' partials: lanes stride over the blocks, then a
// shuffle tree; the order is fixed, so the result is deterministic.
// A warp past the slots' copies the tail after them, as float64.
__global__ void health_finish_kernel(const double* __restrict__ block_out, int blocks,
                                     HealthTail tail, double* __restrict__ out) {
  const int s = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (s == kSlots) {
    int64_t at = kSlots;
    for (int t = 0; t < tail.count; at += tail.numel[t], ++t) {
      const auto* longs = static_cast<const int64_t*>(tail.ptr[t]);
      const auto* floats = static_cast<const float*>(tail.ptr[t]);
      for (int64_t i = lane; i < tail.numel[t]; i += kWarpSize)
        out[at + i] = tail.is_long[t] ? static_cast<double>(longs[i])
                                      : static_cast<double>(floats[i]);
    }
    return;
  }
  if (s > kSlots) return;
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
  Runs runs{};
  runs.start[0] = 0;
  for (const TensorList* list : {&params, &grads}) {
    for (int t = 0; t < list->count; ++t) {
      const float* p = list->ptr[t];
      const bool aligned = (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
      runs.ptr[runs.count] = reinterpret_cast<const float4*>(p);
      runs.start[runs.count + 1] = runs.start[runs.count] + (aligned ? list->numel[t] / 4 : 0);
      ++runs.count;
    }
    if (list == &params) runs.params = runs.count;
  }
  health_kernel<<<blocks, kThreads, 0, stream>>>(scales, opacities, n, params, grads, runs,
                                                 block_out);
}

void launch_health_finish(const double* block_out, int blocks, const HealthTail& tail,
                          double* out, cudaStream_t stream) {
  health_finish_kernel<<<1, 32 * (kSlots + 1), 0, stream>>>(block_out, blocks, tail, out);
}

}  // namespace gsnb
