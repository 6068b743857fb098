// Tile binning's kernels (the host side: render_ops.cpp; the cub sort and scan: sort.cu).
// Splats are first sorted by depth; each then emits one intersection per tile it touches,
// in that order, keyed by (camera, tile) only, and a stable radix sort on those short keys
// leaves every (camera, tile)'s splats contiguous and front to back. Sorting N depths plus
// M short keys moves far less data than sorting M 64-bit (camera, tile, depth) keys.
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "reduce.cuh"

namespace gsnb {
namespace {

constexpr int kThreads = 256;

__global__ void depth_keys_kernel(
    int64_t total, const float* __restrict__ depths, const int* __restrict__ tiles,
    uint32_t* __restrict__ keys, int* __restrict__ ids) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  // Culled splats (no tiles) sort last; visible depths are positive, so their bits order.
  const uint32_t bits = tiles[idx] > 0 ? __float_as_uint(depths[idx]) : 0xffffffffu;
  keys[idx] = bits;
  ids[idx] = (int)idx;
}

__global__ void gather_counts_kernel(
    int64_t total, const int* __restrict__ order, const int* __restrict__ tiles,
    int64_t* __restrict__ counts) {
  const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (p < total) counts[p] = tiles[order[p]];
}

// A splat with more tiles than this is emitted by its whole warp, one tile row per lane: one
// thread walking a large splat's hundreds of tiles held up its warp and the kernel's tail.
constexpr int kWarpEmit = 32;

__device__ __forceinline__ TileWalk shfl_walk(const TileWalk& w, int src) {
  TileWalk o;
  o.mx = __shfl_sync(kFullMask, w.mx, src);
  o.my = __shfl_sync(kFullMask, w.my, src);
  o.A = __shfl_sync(kFullMask, w.A, src);
  o.B = __shfl_sync(kFullMask, w.B, src);
  o.C = __shfl_sync(kFullMask, w.C, src);
  o.r2e = __shfl_sync(kFullMask, w.r2e, src);
  o.py_lo = __shfl_sync(kFullMask, w.py_lo, src);
  o.py_hi = __shfl_sync(kFullMask, w.py_hi, src);
  o.width = __shfl_sync(kFullMask, w.width, src);
  return o;
}

__global__ void emit_kernel(
    int64_t total, int n, const int* __restrict__ order, const int64_t* __restrict__ ends,
    const float* __restrict__ means2d, const float* __restrict__ conics,
    const float* __restrict__ opacities, bool per_camera, bool stored,
    const int* __restrict__ radii, int width, int height,
    int tiles_x, int num_tiles, int capacity, uint32_t* __restrict__ keys,
    int* __restrict__ values) {
  const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & (kWarpSize - 1);
  // No early return: every lane takes part in the warp's walks of large splats below.
  int pos = 0, end = 0, idx = 0;
  float r2 = 0.f;
  bool live = false;
  if (p < total) {
    // Writes stop at the buffers' capacity: past it the caller discards the render.
    pos = p == 0 ? 0 : (int)min(ends[p - 1], (int64_t)capacity);
    end = (int)min(ends[p], (int64_t)capacity);
    if (pos < end) {
      idx = order[p];
      const int gid = idx % n;
      live = extent2(opacity_of(opacities[per_camera ? idx : gid], stored), &r2);
    }
  }
  // Keys are slot + 1: key 0 is left for the unused tail of a buffer larger than the count,
  // which the sort moves to the front, so that the slots' lists end where the buffer does.
  const uint32_t cam_base = (uint32_t)(idx / n) * (uint32_t)num_tiles + 1u;
  TileWalk w{};
  if (live)
    w = tile_walk(means2d[idx * 2], means2d[idx * 2 + 1], conics[idx * 3], conics[idx * 3 + 1],
                  conics[idx * 3 + 2], r2, radii[idx * 2 + 1], width, height);
  const bool by_warp = live && end - pos > kWarpEmit;
  if (live && !by_warp && w.py_lo <= w.py_hi) {
    for (int ty = w.ty_lo(); ty <= w.ty_hi(); ++ty) {
      int tx_lo, tx_hi;
      if (!w.row(ty, &tx_lo, &tx_hi)) continue;
      for (int tx = tx_lo; tx <= tx_hi; ++tx, ++pos) {
        if (pos < end) {
          keys[pos] = cam_base + (uint32_t)(ty * tiles_x + tx);
          values[pos] = idx;
        }
      }
    }
  }
  // The warp's large splats, one after another: lane l walks tile rows ty_lo + l,
  // ty_lo + l + 32, ... and writes them where a scan of the rows' lengths puts them, the
  // positions the per-thread walk would have used. (A splat of one row wider than 32 tiles
  // comes here too and is written by one lane: correct, if no faster.)
  for (unsigned queue = __ballot_sync(kFullMask, by_warp); queue != 0; queue &= queue - 1) {
    const int src = __ffs(queue) - 1;
    const TileWalk sw = shfl_walk(w, src);
    int at0 = __shfl_sync(kFullMask, pos, src);
    const int s_end = __shfl_sync(kFullMask, end, src);
    const int s_idx = __shfl_sync(kFullMask, idx, src);
    const uint32_t s_base = __shfl_sync(kFullMask, cam_base, src);
    if (sw.py_lo > sw.py_hi) continue;
    for (int ty0 = sw.ty_lo(); ty0 <= sw.ty_hi(); ty0 += kWarpSize) {
      const int ty = ty0 + lane;
      int tx_lo = 0, tx_hi = -1;
      if (ty > sw.ty_hi() || !sw.row(ty, &tx_lo, &tx_hi)) tx_hi = tx_lo - 1;
      const int len = tx_hi - tx_lo + 1;
      int incl = len;  // inclusive scan of the row lengths over the lanes
#pragma unroll
      for (int o = 1; o < kWarpSize; o <<= 1) {
        const int below = __shfl_up_sync(kFullMask, incl, o);
        if (lane >= o) incl += below;
      }
      int at = at0 + incl - len;
      for (int tx = tx_lo; tx <= tx_hi; ++tx, ++at) {
        if (at < s_end) {
          keys[at] = s_base + (uint32_t)(ty * tiles_x + tx);
          values[at] = s_idx;
        }
      }
      at0 += __shfl_sync(kFullMask, incl, kWarpSize - 1);
    }
  }
}

// offsets[t] = index of the first intersection whose (camera, tile) slot is >= t; a key is
// its slot + 1, and the unused entries (key 0, slot -1) sort before every slot's.
__global__ void tile_offsets_kernel(
    int64_t m, const uint32_t* __restrict__ keys, int64_t num_slots, int* __restrict__ offsets) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int64_t cur = (int64_t)keys[i] - 1;
  const int64_t prev = i == 0 ? -1 : (int64_t)keys[i - 1] - 1;
  for (int64_t t = prev + 1; t <= cur; ++t) offsets[t] = (int)i;
  if (i == m - 1)
    for (int64_t t = cur + 1; t < num_slots; ++t) offsets[t] = (int)m;
}

// A render whose intersections overflowed the buffers' capacity lacks some: its loss becomes
// NaN, which closes the step's gate (gate.cuh), so that nothing learns from it.
__global__ void flag_overflow_kernel(const int64_t* __restrict__ count, int64_t capacity,
                                     float* __restrict__ loss) {
  if (*count > capacity) *loss = __int_as_float(0x7fc00000);
}

}  // namespace

void launch_depth_keys(int64_t total, const float* depths, const int* tiles, uint32_t* keys,
                       int* ids, cudaStream_t stream) {
  depth_keys_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(total, depths, tiles,
                                                                          keys, ids);
}

void launch_gather_counts(int64_t total, const int* order, const int* tiles, int64_t* counts,
                          cudaStream_t stream) {
  gather_counts_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(total, order, tiles,
                                                                             counts);
}

void launch_emit(int64_t total, int64_t n, const int* order, const int64_t* ends,
                 const float* means2d, const float* conics, const float* opacities,
                 bool per_camera, bool stored, const int* radii, int64_t width, int64_t height,
                 int tiles_x, int64_t num_tiles, int64_t capacity, uint32_t* keys, int* values,
                 cudaStream_t stream) {
  emit_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      total, n, order, ends, means2d, conics, opacities, per_camera, stored, radii, width, height,
      tiles_x, num_tiles, (int)capacity, keys, values);
}

void launch_tile_offsets(int64_t m, const uint32_t* keys, int64_t num_slots, int* offsets,
                         cudaStream_t stream) {
  tile_offsets_kernel<<<blocks_for(m, kThreads), kThreads, 0, stream>>>(m, keys, num_slots,
                                                                        offsets);
}

void launch_flag_overflow(const int64_t* count, int64_t capacity, float* loss,
                          cudaStream_t stream) {
  flag_overflow_kernel<<<1, 1, 0, stream>>>(count, capacity, loss);
}

}  // namespace gsnb
