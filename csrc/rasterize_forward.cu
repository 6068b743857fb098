// Per-tile front-to-back compositing of sorted splats (the backward pass:
// rasterize_backward.cu; the host side: render_ops.cpp).
// One 16x16 thread block per (camera, tile); splats are staged through shared memory.
// CH is the number of blended channels: 3 (rgb) or 4 (rgb and depth).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "raster.cuh"

namespace gsnb {
namespace {

template <int CH>
// (Eight blocks a SM: 32 registers, as before the segments' bookkeeping.)
__global__ void __launch_bounds__(kBlock, 8) rasterize_forward_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, bool stored,
    const int* __restrict__ offsets, const int* __restrict__ flat_ids,
    const float* __restrict__ background, float* __restrict__ out_rgb,
    float* __restrict__ out_depth, float* __restrict__ out_alpha,
    uint16_t* __restrict__ last_ids, const int* __restrict__ seg_starts,
    float* __restrict__ states) {
  const TilePixel p = tile_pixel(offsets, num_cams, width, height, tiles_x, tiles_y, m);
  // Segments (raster.cuh): seg_len 0 records none.
  const int seg_len =
      seg_starts != nullptr ? seg_starts[num_cams * tiles_x * tiles_y + 1] : 0;
  const int seg0 = seg_len > 0 ? seg_starts[p.slot] : 0;
  int recorded = 0;
  __shared__ float4 s_geo[kBlock];
  __shared__ float2 s_bo[kBlock];
  __shared__ float4 s_feat[kBlock];

  float T = 1.f;
  float acc[CH];
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) acc[ch] = 0.f;
  int last = p.start;
  bool done = !p.inside;
  for (int base = p.start; base < p.end; base += kBlock) {
    if (seg_len > 0 && base > p.start && (base - p.start) % seg_len == 0) {
      // Segment `recorded + 1` begins: the transmittance, and the sums so far (turned into
      // the sums from here on below).
      float* state = states + segment_state(seg0 + ++recorded, CH);
      state[p.tr] = T;
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) state[(1 + ch) * kBlock + p.tr] = acc[ch];
    }
    if (__syncthreads_count(done) == kBlock) break;
    const int k = base + p.tr;
    if (k < p.end)
      stage_splat<CH>(k, p.tr, num_opacities, stored, flat_ids, means2d, conics, feats, opacities,
                      s_geo, s_bo, s_feat);
    __syncthreads();
    const int count = min(kBlock, p.end - base);
    for (int t = 0; t < count && !done; ++t) {
      SplatAlpha hit;
      if (!splat_alpha(s_geo[t], s_bo[t], p.px, p.py, hit)) continue;
      const float next_T = T * (1.f - hit.alpha);
      if (next_T < kTransmittanceMin) {
        done = true;
        break;
      }
      const float w = hit.alpha * T;
      const float4 f = s_feat[t];
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) acc[ch] += w * feat_at(f, ch);
      T = next_T;
      last = base + t + 1;
    }
  }
  if (p.inside) {
    // What is left of the transmittance shows the camera's background colour.
#pragma unroll
    for (int ch = 0; ch < 3; ++ch)
      out_rgb[p.pix * 3 + ch] =
          acc[ch] + (background != nullptr ? T * background[p.cam * 3 + ch] : 0.f);
    const float alpha = 1.f - T;
    // Expected depth: the blended depth over the blended alpha.
    if (CH == 4) out_depth[p.pix] = acc[CH - 1] / fmaxf(alpha, kDepthAlphaMin);
    out_alpha[p.pix] = alpha;
    last_ids[p.pix] = pack_last(last, p.start);
  }
  for (int k = 1; k <= recorded; ++k) {
    float* state = states + segment_state(seg0 + k, CH);
#pragma unroll
    for (int ch = 0; ch < CH; ++ch)
      state[(1 + ch) * kBlock + p.tr] = acc[ch] - state[(1 + ch) * kBlock + p.tr];
  }
}

// seg_starts (raster.cuh) from the tiles' lengths: one block; each thread takes a run of
// consecutive slots, and a scan of the runs' totals places them.
constexpr int kScanThreads = 1024;

__global__ void __launch_bounds__(kScanThreads) segment_starts_kernel(
    const int* __restrict__ offsets, int num_slots, int m, int seg_len,
    int* __restrict__ seg_starts) {
  __shared__ int s_sum[kScanThreads];
  const int t = threadIdx.x;
  const int per = (num_slots + kScanThreads - 1) / kScanThreads;
  const int lo = min(t * per, num_slots), hi = min(lo + per, num_slots);
  auto segments = [&](int slot) {
    const TileRange r = slot_range(offsets, slot, num_slots, m);
    return max(1, (r.end - r.start + seg_len - 1) / seg_len);
  };
  int sum = 0;
  for (int slot = lo; slot < hi; ++slot) sum += segments(slot);
  s_sum[t] = sum;
  __syncthreads();
  // Inclusive scan of the runs' totals (Hillis-Steele).
  for (int o = 1; o < kScanThreads; o <<= 1) {
    const int below = t >= o ? s_sum[t - o] : 0;
    __syncthreads();
    s_sum[t] += below;
    __syncthreads();
  }
  int at = s_sum[t] - sum;
  for (int slot = lo; slot < hi; ++slot) {
    seg_starts[slot] = at;
    at += segments(slot);
  }
  if (t == kScanThreads - 1) {
    seg_starts[num_slots] = s_sum[t];
    seg_starts[num_slots + 1] = seg_len;
  }
}

template <int CH>
void launch(int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
            const float* means2d, const float* conics, const float* feats,
            const float* opacities, bool stored, const int* offsets, const int* flat_ids,
            const float* background, float* rgb, float* depth, float* alpha,
            uint16_t* last_ids, const int* seg_starts, float* states, cudaStream_t stream) {
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid(tiles_x, tiles_y, c), block(kTile, kTile);
  rasterize_forward_kernel<CH><<<grid, block, 0, stream>>>(
      c, n, width, height, tiles_x, tiles_y, m, reinterpret_cast<const float2*>(means2d),
      reinterpret_cast<const float3*>(conics), feats, opacities, stored, offsets, flat_ids,
      background, rgb, depth, alpha, last_ids, seg_starts, states);
}

std::atomic<int> segments_setting{0};

}  // namespace

void launch_rasterize_forward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* background, float* rgb,
    float* depth, float* alpha, uint16_t* last_ids, int seg_len, int* seg_starts,
    float* states, cudaStream_t stream) {
  if (seg_len > 0) {
    const int64_t slots = c * div_up(width, kTile) * div_up(height, kTile);
    segment_starts_kernel<<<1, kScanThreads, 0, stream>>>(offsets, (int)slots, (int)m, seg_len,
                                                         seg_starts);
  } else {
    seg_starts = nullptr;
    states = nullptr;
  }
  if (channels == 3)
    launch<3>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, background, rgb, depth, alpha, last_ids, seg_starts, states, stream);
  else
    launch<4>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, background, rgb, depth, alpha, last_ids, seg_starts, states, stream);
}

int rasterize_segments_override(int length) { return segments_setting.exchange(length); }

int rasterize_segment_length(int64_t c, int64_t width, int64_t height, int64_t m) {
  const int forced = segments_setting.load(std::memory_order_relaxed);
  if (forced < 0) return 0;
  if (forced > 0) return forced;
  if (rasterize_rows(c, width, height) != 1) return 0;
  // Segments of 1024 splats; longer where that would record more than 16384 of them.
  return (int)std::max<int64_t>(1024, div_up(div_up(m, 16384), kBlock) * kBlock);
}

}  // namespace gsnb
