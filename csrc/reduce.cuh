// Warp, block and cross-block reductions shared by the kernels that reduce.
// Every fold runs in a fixed order (shuffle trees, warps in index order, blocks strided by
// lane), so a reduction's result does not depend on timing: the same inputs, the same bits.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace gsnb {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  __device__ __forceinline__ double operator()(double a, double b) const { return fmax(a, b); }
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ __forceinline__ int operator()(int a, int b) const { return max(a, b); }
};

// Folds v over the warp down a shuffle tree (offsets 16, 8, 4, 2, 1); lane 0 holds the total.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = op(v, __shfl_down_sync(kFullMask, v, o));
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  return warp_reduce(v, SumOp{});
}

// Folds v over the warp with butterfly (xor) shuffles; every lane holds the total.
template <typename T, typename Op>
__device__ __forceinline__ T warp_all_reduce(T v, Op op) {
#pragma unroll
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// One step of a recursive-halving warp sum: lanes exchange half of their HALF * 2 partial
// sums with the lane 2 * HALF away and keep the other half.
template <int HALF>
__device__ __forceinline__ void halve(float (&v)[16], int lane) {
  const bool up = lane & (2 * HALF);
#pragma unroll
  for (int i = 0; i < HALF; ++i) {
    const float send = up ? v[i] : v[i + HALF];
    const float keep = up ? v[i + HALF] : v[i];
    v[i] = keep + __shfl_xor_sync(kFullMask, send, 2 * HALF);
  }
}

// Sums 16 values over the warp with 16 shuffles instead of 16 x 5: afterwards lane l
// holds the warp total of value (l >> 1) & 15.
__device__ __forceinline__ float warp_sum16(float (&v)[16], int lane) {
  halve<8>(v, lane);
  halve<4>(v, lane);
  halve<2>(v, lane);
  halve<1>(v, lane);
  return v[0] + __shfl_xor_sync(kFullMask, v[0], 1);
}

// K values per thread folded over a block of THREADS threads (tid its flat thread index);
// afterwards thread s < K holds the block total of value s (other threads: unspecified).
// op(s, a, b) folds two partials of value s. scratch is shared memory [K][THREADS / 32]:
// each warp's totals, which thread s then folds in warp order. Every thread must call it;
// a second call on the same scratch needs a __syncthreads() between the two.
template <int THREADS, int K, typename T, typename Op>
__device__ __forceinline__ T block_reduce(const T (&v)[K], T (&scratch)[K][THREADS / kWarpSize],
                                          int tid, Op op) {
  static_assert(THREADS % kWarpSize == 0, "whole warps only");
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
#pragma unroll
  for (int s = 0; s < K; ++s) {
    const T w = warp_reduce(v[s], [&](T a, T b) { return op(s, a, b); });
    if (lane == 0) scratch[s][warp] = w;
  }
  __syncthreads();
  if (tid >= K) return T{};
  T total = scratch[tid][0];
  for (int w = 1; w < THREADS / kWarpSize; ++w) total = op(tid, total, scratch[tid][w]);
  return total;
}

// The cross-block fold of partials [blocks, slots] (row-major, one row per block) for column
// `slot`, by one warp: lanes stride over the blocks from `identity`, then a shuffle tree;
// lane 0 holds the total. T may be wider than the stored partials (float64 over float32).
template <typename T, typename In, typename Op>
__device__ __forceinline__ T fold_blocks(const In* __restrict__ partials, int64_t blocks,
                                         int slots, int slot, int lane, T identity, Op op) {
  T v = identity;
  for (int64_t b = lane; b < blocks; b += kWarpSize)
    v = op(v, static_cast<T>(partials[b * slots + slot]));
  return warp_reduce(v, op);
}

}  // namespace gsnb
