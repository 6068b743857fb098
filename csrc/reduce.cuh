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

// One step of a recursive-halving warp sum of K partial sums: lanes exchange values with
// the lane `mask` away; the lower lane keeps the first ceil(K / 2), the upper one the rest
// (zero-padded to as many), each adding its partner's copy of what it keeps.
template <int K>
__device__ __forceinline__ void halve(float (&v)[16], int lane, int mask) {
  constexpr int kKeep = (K + 1) / 2;
  const bool up = lane & mask;
#pragma unroll
  for (int i = 0; i < kKeep; ++i) {
    const float lo = v[i];
    const float hi = i + kKeep < K ? v[i + kKeep] : 0.f;
    v[i] = (up ? hi : lo) + __shfl_xor_sync(kFullMask, up ? lo : hi, mask);
  }
}

// Sums values 0 .. K-1 (K <= 16) of v over the warp by recursive halving: ceil(K / 2) +
// ceil(K / 4) + ... shuffles (16 for K = 16, 12 for K = 9) instead of 5 K. Afterwards both
// lanes 2 p and 2 p + 1 hold the warp total of value warp_sum_slot<K>(2 p) (none where that
// is -1; those lanes hold 0).
template <int K>
__device__ __forceinline__ float warp_sum_values(float (&v)[16], int lane) {
  static_assert(K >= 1 && K <= 16, "at most 16 values");
  constexpr int K1 = (K + 1) / 2, K2 = (K1 + 1) / 2, K3 = (K2 + 1) / 2;
  halve<K>(v, lane, 16);
  halve<K1>(v, lane, 8);
  halve<K2>(v, lane, 4);
  halve<K3>(v, lane, 2);
  return v[0] + __shfl_xor_sync(kFullMask, v[0], 1);
}

// Which value's total lane `lane` holds after warp_sum_values<K>, or -1: the upper lane of
// each halving takes the values from ceil(count / 2) on, and a lane whose share ran out of
// values holds padding.
template <int K>
__device__ __forceinline__ int warp_sum_slot(int lane) {
  int count = K, real = K, slot = 0;
#pragma unroll
  for (int mask = 16; mask > 1; mask >>= 1) {
    const int keep = (count + 1) / 2;
    if (lane & mask) {
      slot += keep;
      real = max(0, real - keep);
    } else {
      real = min(real, keep);
    }
    count = keep;
  }
  return real >= 1 ? slot : -1;
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
