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

// A pixel's outputs from its blended sums `acc` and what is left of its transmittance T: what
// is left shows the camera's background colour; the expected depth is the blended depth over
// the blended alpha; `last` is one past its last blended intersection.
template <int CH>
__device__ __forceinline__ void write_pixel(const TilePixel& p, const float (&acc)[CH], float T,
                                            int last, const float* __restrict__ background,
                                            float* __restrict__ out_rgb,
                                            float* __restrict__ out_depth,
                                            float* __restrict__ out_alpha,
                                            uint16_t* __restrict__ last_ids) {
#pragma unroll
  for (int ch = 0; ch < 3; ++ch)
    out_rgb[p.pix * 3 + ch] =
        acc[ch] + (background != nullptr ? T * background[p.cam * 3 + ch] : 0.f);
  const float alpha = 1.f - T;
  if (CH == 4) out_depth[p.pix] = acc[CH - 1] / fmaxf(alpha, kDepthAlphaMin);
  out_alpha[p.pix] = alpha;
  last_ids[p.pix] = pack_last(last, p.start);
}

// The walk of one pixel over a staged batch s_*[0, count) of splats base, base + 1, ...,
// unless it is `done`: blends each splat it meets into acc and T and sets `last` one past
// it; where the next transmittance would fall below kTransmittanceMin it stops there, sets
// `done` and returns true (the splat that would cross it not blended).
template <int CH>
__device__ __forceinline__ bool blend_batch(const float4* s_geo, const float2* s_bo,
                                            const float4* s_feat, int count, int base, float px,
                                            float py, float& T, float (&acc)[CH], int& last,
                                            bool& done) {
  for (int t = 0; t < count && !done; ++t) {
    SplatAlpha hit;
    if (!splat_alpha(s_geo[t], s_bo[t], px, py, hit)) continue;
    const float next_T = T * (1.f - hit.alpha);
    if (next_T < kTransmittanceMin) {
      done = true;
      return true;
    }
    const float w = hit.alpha * T;
    const float4 f = s_feat[t];
#pragma unroll
    for (int ch = 0; ch < CH; ++ch) acc[ch] += w * feat_at(f, ch);
    T = next_T;
    last = base + t + 1;
  }
  return false;
}

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
      state[p.at] = T;
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) state[(1 + ch) * kBlock + p.at] = acc[ch];
    }
    if (__syncthreads_count(done) == kBlock) break;
    const int k = base + p.at;
    if (k < p.end)
      stage_splat<CH>(k, p.at, num_opacities, stored, flat_ids, means2d, conics, feats, opacities,
                      s_geo, s_bo, s_feat);
    __syncthreads();
    blend_batch<CH>(s_geo, s_bo, s_feat, min(kBlock, p.end - base), base, p.px, p.py, T, acc,
                    last, done);
  }
  if (p.inside)
    write_pixel<CH>(p, acc, T, last, background, out_rgb, out_depth, out_alpha, last_ids);
  for (int k = 1; k <= recorded; ++k) {
    float* state = states + segment_state(seg0 + k, CH);
#pragma unroll
    for (int ch = 0; ch < CH; ++ch)
      state[(1 + ch) * kBlock + p.at] = acc[ch] - state[(1 + ch) * kBlock + p.at];
  }
}

// The forward over segments (raster.cuh), for grids too small to fill the GPU: the walk of
// a tile's list is cut at its segments, and blocks of their own walk them at once, in three
// passes. `scratch` [S, 3, 256] holds per segment w and pixel: the product of the segment's
// (1 - alpha) (segment_product_kernel), then where the walk left the segment
// (segment_blend_kernel): the transmittance there (negated where the walk stopped inside,
// kDeadBefore where it had stopped before), and one past its last blended intersection as int
// bits (-1: none). Each segment's transmittance in front and blended sums go to the states
// (segment_state); segment_combine_kernel then adds the segments up per pixel and turns the
// states' sums into the sums from each segment on, which the backward reads.
constexpr float kDeadBefore = -2.f;

__device__ __forceinline__ float* scratch_row(float* scratch, int w) {
  return scratch + (int64_t)w * 3 * kBlock;
}

// Pass 1: the product of (1 - alpha) over the segment's splats; a pixel stops once it is
// below kTransmittanceMin, where every later transmittance is too.
__global__ void __launch_bounds__(kBlock) segment_product_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ opacities, bool stored, const int* __restrict__ offsets,
    const int* __restrict__ flat_ids, const int* __restrict__ seg_starts,
    float* __restrict__ scratch) {
  SegmentSpan span;
  if (!segment_span(blockIdx.x, seg_starts, offsets, num_cams * tiles_x * tiles_y, m, span))
    return;
  const TilePixel p =
      slot_pixel(offsets, span.slot, num_cams, width, height, tiles_x, tiles_y, m);
  __shared__ float4 s_geo[kBlock];
  __shared__ float2 s_bo[kBlock];
  float P = 1.f;
  bool done = !p.inside;
  for (int base = span.lo; base < span.hi; base += kBlock) {
    if (__syncthreads_count(done) == kBlock) break;
    const int k = base + p.at;
    if (k < span.hi)
      stage_geometry(k, p.at, num_opacities, stored, flat_ids, means2d, conics, opacities,
                     s_geo, s_bo);
    __syncthreads();
    const int count = min(kBlock, span.hi - base);
    for (int t = 0; t < count && !done; ++t) {
      SplatAlpha hit;
      if (!splat_alpha(s_geo[t], s_bo[t], p.px, p.py, hit)) continue;
      P *= 1.f - hit.alpha;
      done = P < kTransmittanceMin;
    }
  }
  scratch_row(scratch, blockIdx.x)[p.at] = P;
}

// Pass 2: each segment's walk, entered with the products of the tile's earlier segments; it
// stops as the whole walk would.
template <int CH>
__global__ void __launch_bounds__(kBlock) segment_blend_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, bool stored,
    const int* __restrict__ offsets, const int* __restrict__ flat_ids,
    const int* __restrict__ seg_starts, float* __restrict__ scratch,
    float* __restrict__ states) {
  SegmentSpan span;
  if (!segment_span(blockIdx.x, seg_starts, offsets, num_cams * tiles_x * tiles_y, m, span))
    return;
  const TilePixel p =
      slot_pixel(offsets, span.slot, num_cams, width, height, tiles_x, tiles_y, m);
  float T = 1.f;
  for (int v = seg_starts[span.slot]; v < (int)blockIdx.x && T >= kTransmittanceMin; ++v)
    T *= scratch_row(scratch, v)[p.at];
  const float T_in = T;
  const bool dead_before = T_in < kTransmittanceMin;
  __shared__ float4 s_geo[kBlock];
  __shared__ float2 s_bo[kBlock];
  __shared__ float4 s_feat[kBlock];
  float acc[CH];
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) acc[ch] = 0.f;
  int last = -1;
  bool done = !p.inside || dead_before, stopped = false;
  for (int base = span.lo; base < span.hi; base += kBlock) {
    if (__syncthreads_count(done) == kBlock) break;
    const int k = base + p.at;
    if (k < span.hi)
      stage_splat<CH>(k, p.at, num_opacities, stored, flat_ids, means2d, conics, feats, opacities,
                      s_geo, s_bo, s_feat);
    __syncthreads();
    if (blend_batch<CH>(s_geo, s_bo, s_feat, min(kBlock, span.hi - base), base, p.px, p.py, T,
                        acc, last, done))
      stopped = true;
  }
  float* row = scratch_row(scratch, blockIdx.x);
  row[kBlock + p.at] = dead_before ? kDeadBefore : stopped ? -T : T;
  row[2 * kBlock + p.at] = __int_as_float(last);
  float* state = states + segment_state(blockIdx.x, CH);
  state[p.at] = T_in;
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) state[(1 + ch) * kBlock + p.at] = acc[ch];
}

// Pass 3, one block per tile: the segments' sums in order up to where the walk stopped, the
// outputs as rasterize_forward_kernel writes them, and from the back the states' sums of
// w f from each segment on.
template <int CH>
__global__ void __launch_bounds__(kBlock) segment_combine_kernel(
    int num_cams, int width, int height, int tiles_x, int tiles_y, int m,
    const int* __restrict__ offsets, const int* __restrict__ seg_starts,
    const float* __restrict__ background, const float* __restrict__ scratch,
    float* __restrict__ states, float* __restrict__ out_rgb, float* __restrict__ out_depth,
    float* __restrict__ out_alpha, uint16_t* __restrict__ last_ids) {
  const TilePixel p = tile_pixel(offsets, num_cams, width, height, tiles_x, tiles_y, m);
  const int first = seg_starts[p.slot], stop = seg_starts[p.slot + 1];  // [slots] is the count
  float acc[CH];
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) acc[ch] = 0.f;
  float T = 1.f;
  int last = p.start, end = first;  // end: one past the last segment the walk entered
  for (int v = first; v < stop; ++v) {
    const float* row = scratch + (int64_t)v * 3 * kBlock;
    const float left = row[kBlock + p.at];
    if (left == kDeadBefore) break;
    const float* state = states + segment_state(v, CH);
#pragma unroll
    for (int ch = 0; ch < CH; ++ch) acc[ch] += state[(1 + ch) * kBlock + p.at];
    T = fabsf(left);
    const int seg_last = __float_as_int(row[2 * kBlock + p.at]);
    if (seg_last >= 0) last = seg_last;
    end = v + 1;
    if (left < 0.f) break;  // the walk stopped in this segment
  }
  float behind[CH];
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) behind[ch] = 0.f;
  for (int v = stop - 1; v >= first; --v) {
    float* state = states + segment_state(v, CH);
#pragma unroll
    for (int ch = 0; ch < CH; ++ch) {
      if (v < end) behind[ch] += state[(1 + ch) * kBlock + p.at];
      state[(1 + ch) * kBlock + p.at] = behind[ch];
    }
  }
  if (p.inside)
    write_pixel<CH>(p, acc, T, last, background, out_rgb, out_depth, out_alpha, last_ids);
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
            uint16_t* last_ids, const int* seg_starts, float* states, float* scratch,
            int64_t max_segments, cudaStream_t stream) {
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid(tiles_x, tiles_y, c), block(kTile, kTile);
  const auto* xy = reinterpret_cast<const float2*>(means2d);
  const auto* co = reinterpret_cast<const float3*>(conics);
  if (scratch == nullptr) {
    rasterize_forward_kernel<CH><<<grid, block, 0, stream>>>(
        c, n, width, height, tiles_x, tiles_y, m, xy, co, feats, opacities, stored, offsets,
        flat_ids, background, rgb, depth, alpha, last_ids, seg_starts, states);
    return;
  }
  const dim3 segments((unsigned)max_segments);
  segment_product_kernel<<<segments, block, 0, stream>>>(c, n, width, height, tiles_x, tiles_y,
                                                         m, xy, co, opacities, stored, offsets,
                                                         flat_ids, seg_starts, scratch);
  segment_blend_kernel<CH><<<segments, block, 0, stream>>>(
      c, n, width, height, tiles_x, tiles_y, m, xy, co, feats, opacities, stored, offsets,
      flat_ids, seg_starts, scratch, states);
  segment_combine_kernel<CH><<<grid, block, 0, stream>>>(c, width, height, tiles_x, tiles_y, m,
                                                         offsets, seg_starts, background,
                                                         scratch, states, rgb, depth, alpha,
                                                         last_ids);
}

std::atomic<int> segments_setting{0};
std::atomic<int> forward_segments_setting{0};

}  // namespace

void launch_rasterize_forward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* background, float* rgb,
    float* depth, float* alpha, uint16_t* last_ids, int seg_len, int* seg_starts,
    float* states, float* scratch, cudaStream_t stream) {
  const int64_t slots = c * div_up(width, kTile) * div_up(height, kTile);
  if (seg_len > 0) {
    segment_starts_kernel<<<1, kScanThreads, 0, stream>>>(offsets, (int)slots, (int)m, seg_len,
                                                         seg_starts);
  } else {
    seg_starts = nullptr;
    states = nullptr;
    scratch = nullptr;
  }
  const int64_t max_segments = seg_len > 0 ? slots + div_up(m, seg_len) : 0;
  if (channels == 3)
    launch<3>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, background, rgb, depth, alpha, last_ids, seg_starts, states, scratch,
              max_segments, stream);
  else
    launch<4>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, background, rgb, depth, alpha, last_ids, seg_starts, states, scratch,
              max_segments, stream);
}

int rasterize_segments_override(int length) { return segments_setting.exchange(length); }

int rasterize_segment_length(int64_t c, int64_t width, int64_t height, int64_t m) {
  const int forced = segments_setting.load(std::memory_order_relaxed);
  if (forced < 0) return 0;
  if (forced > 0) return forced;
  if (rasterize_rows(c, width, height) != 1) return 0;
  // Segments of 1024 splats, 512 on grids below one wave of one-pixel blocks (where the
  // forward walks them at once too: twice the blocks to fill the GPU with); longer where
  // that would record more than 16384 of them.
  const int64_t base = one_pixel_waves(c, width, height) == 0 ? 512 : 1024;
  return (int)std::max<int64_t>(base, div_up(div_up(m, 16384), kBlock) * kBlock);
}

int rasterize_forward_segments_override(int mode) {
  return forward_segments_setting.exchange(mode);
}

bool rasterize_forward_by_segments(int64_t c, int64_t width, int64_t height) {
  const int forced = forward_segments_setting.load(std::memory_order_relaxed);
  if (forced != 0) return forced > 0;
  const int64_t waves = one_pixel_waves(c, width, height);
  return waves == 0;
}

}  // namespace gsnb
