// What the forward and backward rasterize kernels share, so that the two cannot drift
// apart: which intersections a block's tile holds, how a batch of splats is staged through
// shared memory, and a splat's alpha at a pixel centre (the forward's pixel of a thread:
// tile_pixel; the backward maps its rows per thread itself: rasterize_rows).
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "common.cuh"
#include "launch.h"

namespace gsnb {

// The expected depth is the blended depth over max(alpha, kDepthAlphaMin).
constexpr float kDepthAlphaMin = 1e-10f;

// A pixel's walk ends one past its last contributing intersection; the forward pass stores
// that end relative to the tile's first intersection in 16 bits, for the backward pass. A
// walk of kLastUnknown splats or more stores kLastUnknown: the backward pass walks that
// pixel's tile front to back again to find its end (rasterize_backward.cu).
constexpr int kLastUnknown = 0xFFFF;

__device__ __forceinline__ uint16_t pack_last(int last, int start) {
  return static_cast<uint16_t>(min(last - start, kLastUnknown));
}

// How many times a grid of one-pixel blocks of 256 threads, one per (camera, tile), fills
// the current device's SMs (2048 threads fit on one), rounded down; -1 where the device
// cannot be read.
inline int64_t one_pixel_waves(int64_t cams, int64_t width, int64_t height) {
  constexpr int kDevices = 64;
  static int sms[kDevices] = {};  // each device's SM count, read once
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) return -1;
  if (sms[device] == 0) {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return -1;
    sms[device] = count;
  }
  const int64_t blocks = cams * div_up(width, kTile) * div_up(height, kTile);
  return blocks / ((int64_t)sms[device] * (2048 / kBlock));
}

// Pixels a thread of the backward compositing shades: 2 (its warp sums then serve twice the
// pixels) unless one-pixel blocks of 256 threads, one per (camera, tile), would fill the SMs
// (2048 threads fit on one) fewer than four times: then 1, since two-pixel blocks halve a
// small grid's parallelism, and one pixel a thread walks segments of the tiles' long lists
// in parallel (rasterize_segment_length). Measured on an H200 (132 SMs; 4 waves are 4224
// blocks; benchmarks/results/rows_h200.json): at 8160 blocks and more two took 0.83-0.93x
// one's time; at 2040 (one 540x960 training image) one with segments took 0.84-0.91x two's
// (two leases), at 540 (4x135x240) 0.57-0.59x. rasterize_rows_override (launch.h) can force
// either.
inline int rasterize_rows(int64_t cams, int64_t width, int64_t height) {
  const int forced = rasterize_rows_setting();
  if (forced != 0) return forced;
  const int64_t waves = one_pixel_waves(cams, width, height);
  return waves >= 0 && waves < 4 ? 1 : 2;
}

// Thread `tr`'s column x and first row y in its tile when each warp of the block shades a
// patch PATCH (8 or 16) pixels wide and 32 / PATCH * ROWS pixels tall: x =
// warp % (16 / PATCH) * PATCH + lane % PATCH, y = (warp / (16 / PATCH) * (32 / PATCH) + lane /
// PATCH) * ROWS, in shifts (written with / and %, ptxas gave two rows a thread 64 registers
// against 56). PATCH 16 is thread (x, y) of a (16, 16 / ROWS) block.
template <int PATCH, int ROWS>
__device__ __forceinline__ void patch_pixel(int tr, int& x, int& y) {
  static_assert(PATCH == 8 || PATCH == kTile, "patches 8 or 16 pixels wide");
  constexpr int kLog = PATCH == 8 ? 3 : 4;  // log2 of PATCH
  const int warp = tr >> 5, lane = tr & 31;
  x = ((warp & ((kTile >> kLog) - 1)) << kLog) | (lane & (PATCH - 1));
  y = (((warp >> (4 - kLog)) << (5 - kLog)) + (lane >> kLog)) * ROWS;
}

// The pixel a thread of a forward rasterize block shades. The grid is (tiles_x, tiles_y,
// cameras) of 16x16 blocks, one per tile; each warp shades an 8 x 4 patch of the tile
// (patch_pixel<8, 1>), as the backward's warps do, so that a small splat is skipped by the
// whole of more warps.
struct TilePixel {
  int cam;         // camera, blockIdx.z
  int at;          // the pixel's rank in its tile row by row: its per-pixel records' index
                   // and its thread's slot in the staged batches
  int i, j;        // pixel row and column in the image
  float px, py;    // the pixel's centre (j + 0.5, i + 0.5)
  bool inside;     // the last tile row and column may overhang the image
  int64_t pix;     // flat index of the pixel in [C, H, W]
  int start, end;  // the tile's intersections [start, end) in the sorted list
  int slot;        // the (camera, tile) slot, block_slot
};

// The intersections [start, end) of a (camera, tile) slot in the sorted list.
struct TileRange {
  int start, end;
};

// offsets [C, tiles_y, tiles_x] hold the first intersection of each of the num_slots
// (camera, tile) slots in the m sorted intersections; a slot ends where the next begins, the
// last one at m.
__device__ __forceinline__ TileRange slot_range(const int* __restrict__ offsets, int slot,
                                                int num_slots, int m) {
  TileRange r;
  r.start = offsets[slot];
  r.end = slot == num_slots - 1 ? m : offsets[slot + 1];
  return r;
}

// The slot of the block's tile (blockIdx.x, blockIdx.y) of camera blockIdx.z.
__device__ __forceinline__ int block_slot(int tiles_x, int tiles_y) {
  return (blockIdx.z * tiles_y + blockIdx.y) * tiles_x + blockIdx.x;
}

// Segments: on small grids, whose few tiles each hold long lists of splats, the backward
// compositing runs one block per segment of L splats of a tile (L a multiple of kBlock;
// rasterize_segment_length) instead of one per tile, so that a long list is walked by
// several blocks at once. seg_starts [slots + 2] int32 holds the first segment of each slot
// (a slot has max(1, ceil(length / L)) of them), the total at [slots] and L at [slots + 1].
// The forward pass records, where each segment k >= 1 of a tile begins, what the backward's
// walk of each pixel carries there (segment_state): the transmittance in front of the
// segment and, per channel, the sum of w f of the splats the pixel blends from there on.
__device__ __forceinline__ int64_t segment_state(int segment, int channels) {
  return (int64_t)segment * (channels + 1) * kBlock;
}

// Segment w of the seg_starts layout: its slot, the slot's whole list, and its own
// intersections [lo, hi) of that list.
struct SegmentSpan {
  int slot;
  TileRange range;
  int lo, hi;
};

// Fills `s` for segment w; false past the last segment (grids over the segments are sized
// by an upper bound on their count, seg_starts[num_slots] holds the count itself).
__device__ __forceinline__ bool segment_span(int w, const int* __restrict__ seg_starts,
                                             const int* __restrict__ offsets, int num_slots,
                                             int m, SegmentSpan& s) {
  if (w >= seg_starts[num_slots]) return false;
  // The last slot whose first segment is at or before w (every slot has one or more).
  int a = 0, b = num_slots - 1;
  while (a < b) {
    const int mid = (a + b + 1) / 2;
    if (seg_starts[mid] <= w) a = mid; else b = mid - 1;
  }
  s.slot = a;
  s.range = slot_range(offsets, a, num_slots, m);
  const int seg_len = seg_starts[num_slots + 1];
  s.lo = s.range.start + (w - seg_starts[a]) * seg_len;
  s.hi = min(s.lo + seg_len, s.range.end);
  return true;
}

// The pixel of thread (threadIdx.x, threadIdx.y) of slot `slot`'s tile, and the slot's
// intersections.
__device__ __forceinline__ TilePixel slot_pixel(const int* __restrict__ offsets, int slot,
                                                int num_cams, int width, int height,
                                                int tiles_x, int tiles_y, int m) {
  TilePixel p;
  const int num_tiles = tiles_x * tiles_y, tile = slot % num_tiles;
  p.cam = slot / num_tiles;
  int x, y;
  patch_pixel<8, 1>(threadIdx.y * kTile + threadIdx.x, x, y);
  p.at = y * kTile + x;
  p.i = tile / tiles_x * kTile + y;
  p.j = tile % tiles_x * kTile + x;
  p.px = (float)p.j + 0.5f;
  p.py = (float)p.i + 0.5f;
  p.inside = p.i < height && p.j < width;
  p.pix = ((int64_t)p.cam * height + p.i) * width + p.j;
  p.slot = slot;
  const TileRange r = slot_range(offsets, slot, num_cams * num_tiles, m);
  p.start = r.start;
  p.end = r.end;
  return p;
}

// The pixel of thread (threadIdx.x, threadIdx.y) of the block's tile (block_slot): as
// slot_pixel, from the block's coordinates.
__device__ __forceinline__ TilePixel tile_pixel(const int* __restrict__ offsets, int num_cams,
                                                int width, int height, int tiles_x, int tiles_y,
                                                int m) {
  TilePixel p;
  p.cam = blockIdx.z;
  int x, y;
  patch_pixel<8, 1>(threadIdx.y * kTile + threadIdx.x, x, y);
  p.at = y * kTile + x;
  p.i = blockIdx.y * kTile + y;
  p.j = blockIdx.x * kTile + x;
  p.px = (float)p.j + 0.5f;
  p.py = (float)p.i + 0.5f;
  p.inside = p.i < height && p.j < width;
  p.pix = ((int64_t)p.cam * height + p.i) * width + p.j;
  p.slot = block_slot(tiles_x, tiles_y);
  const TileRange r = slot_range(offsets, p.slot, num_cams * tiles_x * tiles_y, m);
  p.start = r.start;
  p.end = r.end;
  return p;
}

// Copies intersection k's splat into slot `at` of the block's shared batch, packed so that
// a thread reads a splat with three loads: `s_geo` (x, y, a, c) holds its mean and the
// conic's diagonal, `s_bo` (b, opacity) the conic's off-diagonal and its opacity, `s_feat`
// its CH <= 4 features (zero-padded). Returns its flat id c * N + n.
// The opacity is at index g % num_opacities: per Gaussian (N of them) or per camera and
// Gaussian (C N, antialiased mode); `stored` takes it through the sigmoid.
// stage_geometry stages the first two, for a walk that needs no features.
__device__ __forceinline__ int stage_geometry(int k, int at, int num_opacities, bool stored,
                                              const int* __restrict__ flat_ids,
                                              const float2* __restrict__ means2d,
                                              const float3* __restrict__ conics,
                                              const float* __restrict__ opacities,
                                              float4* s_geo, float2* s_bo) {
  const int g = flat_ids[k];
  const float2 xy = means2d[g];
  const float3 co = conics[g];
  s_geo[at] = make_float4(xy.x, xy.y, co.x, co.z);
  s_bo[at] = make_float2(co.y, opacity_of(opacities[g % num_opacities], stored));
  return g;
}

template <int CH>
__device__ __forceinline__ int stage_splat(
    int k, int at, int num_opacities, bool stored, const int* __restrict__ flat_ids,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, float4* s_geo,
    float2* s_bo, float4* s_feat) {
  static_assert(CH == 3 || CH == 4, "3 or 4 blended channels");
  const int g =
      stage_geometry(k, at, num_opacities, stored, flat_ids, means2d, conics, opacities, s_geo,
                     s_bo);
  const float* f = feats + (int64_t)g * CH;
  s_feat[at] = make_float4(f[0], f[1], f[2], CH == 4 ? f[3] : 0.f);
  return g;
}

// Feature ch of a staged splat's zero-padded features.
__device__ __forceinline__ float feat_at(const float4& f, int ch) {
  return ch == 0 ? f.x : ch == 1 ? f.y : ch == 2 ? f.z : f.w;
}

// A splat seen from a pixel centre.
struct SplatAlpha {
  float dx, dy;  // pixel centre minus the splat's mean
  float vis;     // exp(-sigma), sigma = d^T Q d / 2 with the conic Q = [[a, b], [b, c]]
  float raw;     // opacity * vis; alpha's gradient is cut where it exceeds kAlphaMax
  float alpha;   // min(kAlphaMax, raw)
};

// Fills `s` for the staged splat `geo` (x, y, a, c), `bo` (b, opacity) at (px, py), the
// conic Q = [[a, b], [b, c]]; returns whether it contributes there: sigma >= 0 (NaN does not)
// and alpha >= 1/255.
__device__ __forceinline__ bool splat_alpha(float4 geo, float2 bo, float px, float py,
                                            SplatAlpha& s) {
  s.dx = px - geo.x;
  s.dy = py - geo.y;
  const float sigma = 0.5f * (geo.z * s.dx * s.dx + geo.w * s.dy * s.dy) + bo.x * s.dx * s.dy;
  s.vis = __expf(-sigma);
  s.raw = bo.y * s.vis;
  s.alpha = fminf(kAlphaMax, s.raw);
  return sigma >= 0.f && s.alpha >= kAlphaMin;
}

}  // namespace gsnb
