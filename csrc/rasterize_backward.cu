// The backward pass of the per-tile compositing (rasterize_forward.cu; the host side:
// render_ops.cpp): gradients of the splats' means, conics, features and opacities.
// CH is the number of blended channels: 3 (rgb) or 4 (rgb and depth).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "raster.cuh"
#include "reduce.cuh"

namespace gsnb {
namespace {

// Per splat of a batch, the block's sums over its pixels, one padded row of 13 per splat:
// five moments of the splat's geometry gradient, the CH features' gradients, the opacity's
// and, with ABS, |means2d|'s x y over the opacity. Per pixel, with u = d loss / d opacity
// (vis times d loss / d alpha) and d = pixel centre - mean: u dx, u dy, u dx dx, u dx dy,
// u dy dy. Where alpha = opacity vis, d loss / d sigma = -opacity u, so the means' and the
// conic's gradients are those moments times the splat's opacity and conic, applied once per
// splat where the block's sums of a batch go out instead of once per pixel.
constexpr int kGradSlots = 12;
constexpr int kGradStride = 13;

// The number of those values: 9 to 12.
template <int CH, bool ABS>
constexpr int grad_values() {
  return ABS ? 8 + CH : 6 + CH;
}

// Each thread shades ROWS (rasterize_rows: 2, or 1 for grids too small to fill the GPU)
// vertically adjacent pixels of its tile's column, so a warp covers 32 ROWS pixels and the
// warp-wide sum of a splat's gradients, which costs more than a pixel's own arithmetic, is
// paid once for all of them. The warp's pixels form a patch of the tile PATCH pixels wide:
// 8 (8 x 4 ROWS, the default: kPatchWidth) or 16 (whole rows, 16 x 2 ROWS). A small splat
// meets fewer of the squarer patches, and so fewer of those sums.

// One pixel's walk back through its splats: what it carries from splat to splat.
template <int CH>
struct PixelBack {
  float px, py;    // the pixel's centre
  int last;        // one past its last contributing intersection
  float T;         // transmittance in front of the current splat
  float T_final;   // transmittance behind all of them
  float v_a;       // the loss's gradient of the pixel's alpha, background and depth included
  float v_out[CH];
  float tv;        // T_final v_a
  float behind;    // sum over the channels of v_out times the w f of the splats behind
};

// Adds the gradients that pixel `q` gives the staged splat (geo, bo, feat), which `hit`
// found to contribute there, to v (the warp-summed slots of kGradSlots' layout).
template <int CH, bool ABS>
__device__ __forceinline__ void add_pixel_grads(PixelBack<CH>& q, const SplatAlpha& hit,
                                                float4 geo, float2 bo, const float4& feat,
                                                float (&v)[16]) {
  const float alpha = hit.alpha;
  const float ra = 1.f / (1.f - alpha);
  q.T *= ra;
  const float w = alpha * q.T;
  float fv = 0.f;  // sum over the channels of f v_out
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) {
    v[5 + ch] += w * q.v_out[ch];
    fv += feat_at(feat, ch) * q.v_out[ch];
  }
  // d loss / d alpha = T_final ra v_a + sum over the channels of (f T - behind ra) v_out.
  const float v_alpha = fv * q.T + ra * (q.tv - q.behind);
  q.behind += w * fv;
  // Past the clamp alpha is the constant kAlphaMax: no gradient into the splat.
  if (hit.raw <= kAlphaMax) {
    const float u = hit.vis * v_alpha;
    const float ux = u * hit.dx, uy = u * hit.dy;
    v[0] += ux;
    v[1] += uy;
    v[2] += ux * hit.dx;
    v[3] += ux * hit.dy;
    v[4] += uy * hit.dy;
    v[5 + CH] += u;
    if (ABS) {  // the pixel's |d loss / d means2d| over the opacity
      v[6 + CH] += fabsf(geo.z * ux + bo.x * uy);
      v[7 + CH] += fabsf(bo.x * ux + geo.w * uy);
    }
  }
}

// Walks the tile's splats front to back, as the forward pass does, for the pixels whose
// end the forward pass could not store in 16 bits (`unknown`), and sets their `last`. Every
// thread of the block takes part (the batches are staged together).
template <int CH, int ROWS>
__device__ __forceinline__ void find_unknown_ends(
    TileRange range, PixelBack<CH> (&px)[ROWS], const bool (&unknown)[ROWS], int tr,
    int num_opacities, bool stored, const int* __restrict__ flat_ids,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, float4* s_geo,
    float2* s_bo, float4* s_feat) {
  constexpr int kThreads = kBlock / ROWS;
  float T[ROWS];
  bool done[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    T[r] = 1.f;
    done[r] = !unknown[r];
    if (unknown[r]) px[r].last = range.start;
  }
  for (int base = range.start; base < range.end; base += kThreads) {
    __syncthreads();
    const int k = base + tr;
    if (k < range.end)
      stage_splat<CH>(k, tr, num_opacities, stored, flat_ids, means2d, conics, feats,
                      opacities, s_geo, s_bo, s_feat);
    __syncthreads();
    const int count = min(kThreads, range.end - base);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      for (int t = 0; t < count && !done[r]; ++t) {
        SplatAlpha hit;
        if (!splat_alpha(s_geo[t], s_bo[t], px[r].px, px[r].py, hit)) continue;
        const float next_T = T[r] * (1.f - hit.alpha);
        if (next_T < kTransmittanceMin) {
          done[r] = true;
          break;
        }
        T[r] = next_T;
        px[r].last = base + t + 1;
      }
    }
  }
  __syncthreads();  // the batches' shared memory is the caller's again
}

// A (kTile, kTile / ROWS) block per (camera, tile); thread tr shades ROWS pixels of a
// column of its warp's patch, PATCH pixels wide (patch_pixel); the forward's thread of a
// pixel is the pixel's rank in the tile row by row. ABS: v_means2d_abs is given (AbsGS); the
// warp sums then carry two more values.
template <int CH, int ROWS, int PATCH, bool ABS>
__global__ void __launch_bounds__(kBlock / ROWS) rasterize_backward_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, bool stored,
    const int* __restrict__ offsets, const int* __restrict__ flat_ids,
    const float* __restrict__ out_alpha, const float* __restrict__ out_depth,
    const uint16_t* __restrict__ last_ids, const float* __restrict__ background,
    const float* __restrict__ v_rgb, const float* __restrict__ v_depth,
    const float* __restrict__ v_out_alpha,
    float* __restrict__ v_means2d, float* __restrict__ v_conics, float* __restrict__ v_feats,
    float* __restrict__ v_opacities, float* __restrict__ v_means2d_abs,
    const int* __restrict__ seg_starts, const float* __restrict__ states) {
  constexpr int kThreads = kBlock / ROWS;
  // The block's splats [lo, hi) of its tile's `range`: the whole tile (a grid over the tiles),
  // or one segment (raster.cuh; a one-dimensional grid over the segments). `state`: where
  // the forward recorded the walk's state at hi, for pixels that walk past it.
  const int num_slots = num_cams * tiles_x * tiles_y;
  int tile = 0;
  int lo = 0, hi = 0;
  const float* state = nullptr;
  TileRange range;
  if (seg_starts == nullptr) {
    tile = block_slot(tiles_x, tiles_y);
    range = slot_range(offsets, tile, num_slots, m);
    lo = range.start;
    hi = range.end;
  } else {
    SegmentSpan span;
    // Past the last segment: the whole block returns.
    if (!segment_span(blockIdx.x, seg_starts, offsets, num_slots, m, span)) return;
    tile = span.slot;
    range = span.range;
    lo = span.lo;
    hi = span.hi;
    if (hi < range.end) state = states + segment_state(blockIdx.x + 1, CH);
  }
  const int num_tiles = tiles_x * tiles_y;
  const int cam = tile / num_tiles, tile_y = tile % num_tiles / tiles_x;
  const int tile_x = tile % tiles_x;
  const int tr = threadIdx.y * kTile + threadIdx.x, lane = tr & 31;
  int x = 0, y = 0;  // the thread's column and first row in the tile
  patch_pixel<PATCH, ROWS>(tr, x, y);
  const int j = tile_x * kTile + x;
  __shared__ int s_id[kThreads];
  __shared__ float4 s_geo[kThreads];
  __shared__ float2 s_bo[kThreads];
  __shared__ float4 s_feat[kThreads];
  __shared__ float s_grad[kThreads * kGradStride];

  PixelBack<CH> px[ROWS];
  bool unknown[ROWS];
  bool any_unknown = false;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    PixelBack<CH>& q = px[r];
    const int i = tile_y * kTile + y + r;
    const bool inside = i < height && j < width;
    const int64_t pix = ((int64_t)cam * height + i) * width + j;
    q.px = (float)j + 0.5f;
    q.py = (float)i + 0.5f;
    const float alpha_out = inside ? out_alpha[pix] : 0.f;
    q.T_final = 1.f - alpha_out;
    q.T = q.T_final;
    // An overhanging pixel contributes nothing: its walk is empty.
    const int rel = inside ? last_ids[pix] : 0;
    unknown[r] = rel == kLastUnknown;
    any_unknown = any_unknown || unknown[r];
    q.last = range.start + rel;
#pragma unroll
    for (int ch = 0; ch < 3; ++ch) q.v_out[ch] = inside ? v_rgb[pix * 3 + ch] : 0.f;
    // Outputs the loss did not use have no gradient buffer (nullptr): zero.
    q.v_a = inside && v_out_alpha != nullptr ? v_out_alpha[pix] : 0.f;
    // rgb = blend + (1 - alpha) * background: the background's share enters through alpha.
    if (background != nullptr) {
#pragma unroll
      for (int ch = 0; ch < 3; ++ch) q.v_a -= q.v_out[ch] * background[cam * 3 + ch];
    }
    if (CH == 4) {
      // depth = blended depth / max(alpha, eps): chain rule into the blend and into alpha.
      const float a = fmaxf(alpha_out, kDepthAlphaMin);
      const float vd = inside && v_depth != nullptr ? v_depth[pix] : 0.f;
      q.v_out[CH - 1] = vd / a;
      if (alpha_out >= kDepthAlphaMin) q.v_a -= vd * (inside ? out_depth[pix] : 0.f) / a;
    }
    q.tv = q.T_final * q.v_a;
    q.behind = 0.f;
  }

  if (__syncthreads_or(any_unknown))  // rare: a walk past 65534 splats of the tile
    find_unknown_ends<CH, ROWS>(range, px, unknown, tr, num_opacities, stored, flat_ids,
                                means2d, conics, feats, opacities, s_geo, s_bo, s_feat);
  if (state != nullptr) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      PixelBack<CH>& q = px[r];
      if (q.last <= hi) continue;
      // The walk goes on past the segment: it enters it from hi with the recorded state.
      const int at = (y + r) * kTile + x;  // the forward's thread
      q.T = state[at];
      q.behind = 0.f;
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) q.behind += state[(1 + ch) * kBlock + at] * q.v_out[ch];
      q.last = hi;
    }
  }
  int last_max = lo;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) last_max = max(last_max, px[r].last);

  // The largest last index of the block and of this warp: nothing beyond contributed.
  __shared__ int s_last;
  if (tr == 0) s_last = lo;
  __syncthreads();
  atomicMax(&s_last, last_max);
  const int warp_last = warp_all_reduce(last_max, MaxOp{});
  __syncthreads();
  const int block_end = s_last;

  // The value of a splat's gradients whose warp total this lane holds (or -1), and so adds.
  constexpr int kValues = grad_values<CH, ABS>();
  const int slot = warp_sum_slot<kValues>(lane);
  for (int top = block_end; top > lo; top -= kThreads) {
    __syncthreads();
    const int k = top - 1 - tr;
    if (k >= lo)
      s_id[tr] = stage_splat<CH>(k, tr, num_opacities, stored, flat_ids, means2d, conics, feats,
                                 opacities, s_geo, s_bo, s_feat);
#pragma unroll
    for (int s2 = 0; s2 < kGradStride; ++s2) s_grad[tr * kGradStride + s2] = 0.f;
    __syncthreads();
    const int count = min(kThreads, top - lo);
    // Splats at or beyond this warp's last index cannot touch its pixels.
    for (int t = max(0, top - warp_last); t < count; ++t) {
      const int kk = top - 1 - t;
      const float4 geo = s_geo[t];
      const float2 bo = s_bo[t];
      SplatAlpha hit[ROWS];
      bool valid[ROWS];
      bool any = false;
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        valid[r] = kk < px[r].last && splat_alpha(geo, bo, px[r].px, px[r].py, hit[r]);
        any = any || valid[r];
      }
      if (!__any_sync(kFullMask, any)) continue;
      float v[16];
#pragma unroll
      for (int s2 = 0; s2 < 16; ++s2) v[s2] = 0.f;
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        if (valid[r]) add_pixel_grads<CH, ABS>(px[r], hit[r], geo, bo, s_feat[t], v);
      // Warp sum, then one shared-memory atomic per value: the block's warps meet there
      // and the batch is flushed to global memory once, below.
      const float total = warp_sum_values<kValues>(v, lane);
      if ((lane & 1) == 0 && slot >= 0 && total != 0.f)
        atomicAdd(&s_grad[t * kGradStride + slot], total);
    }
    __syncthreads();
    if (k >= lo) {
      const int g = s_id[tr];
      const float* row = s_grad + tr * kGradStride;
      float* dst[kGradSlots];
      dst[0] = v_means2d + (int64_t)g * 2;
      dst[1] = dst[0] + 1;
      dst[2] = v_conics + (int64_t)g * 3;
      dst[3] = dst[2] + 1;
      dst[4] = dst[2] + 2;
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) dst[5 + ch] = v_feats + (int64_t)g * CH + ch;
      dst[5 + CH] = v_opacities + g % num_opacities;
      if (ABS) {
        dst[6 + CH] = v_means2d_abs + (int64_t)g * 2;
        dst[7 + CH] = dst[6 + CH] + 1;
      }
      // The moments times the splat's opacity and conic (the layout above); a stored logit:
      // d sigmoid(v) / dv = o (1 - o).
      const float4 geo = s_geo[tr];
      const float o = s_bo[tr].y, b = s_bo[tr].x;
      float grad[kGradSlots];
      grad[0] = o * (geo.z * row[0] + b * row[1]);
      grad[1] = o * (b * row[0] + geo.w * row[1]);
      grad[2] = -0.5f * o * row[2];
      grad[3] = -o * row[3];
      grad[4] = -0.5f * o * row[4];
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) grad[5 + ch] = row[5 + ch];
      grad[5 + CH] = stored ? row[5 + CH] * o * (1.f - o) : row[5 + CH];
      if (ABS) {
        grad[6 + CH] = o * row[6 + CH];
        grad[7 + CH] = o * row[7 + CH];
      }
#pragma unroll
      for (int s2 = 0; s2 < kValues; ++s2)
        if (grad[s2] != 0.f) atomicAdd(dst[s2], grad[s2]);
    }
  }
}

template <int CH, int ROWS, int PATCH>
void launch_rows(int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
                 const float* means2d, const float* conics, const float* feats,
                 const float* opacities, bool stored, const int* offsets, const int* flat_ids,
                 const float* alpha, const float* depth, const uint16_t* last_ids,
                 const float* background, const float* v_rgb, const float* v_depth,
                 const float* v_alpha, float* v_means2d, float* v_conics, float* v_feats,
                 float* v_opacities, float* v_abs, const int* seg_starts, const float* states,
                 int64_t num_segments, cudaStream_t stream) {
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid = seg_starts != nullptr ? dim3((unsigned)num_segments)
                                          : dim3(tiles_x, tiles_y, c);
  const dim3 block(kTile, kTile / ROWS);
  const auto kernel = v_abs != nullptr ? rasterize_backward_kernel<CH, ROWS, PATCH, true>
                                       : rasterize_backward_kernel<CH, ROWS, PATCH, false>;
  kernel<<<grid, block, 0, stream>>>(
      c, n, width, height, tiles_x, tiles_y, m, reinterpret_cast<const float2*>(means2d),
      reinterpret_cast<const float3*>(conics), feats, opacities, stored, offsets, flat_ids,
      alpha, depth, last_ids, background, v_rgb, v_depth, v_alpha, v_means2d, v_conics,
      v_feats, v_opacities, v_abs, seg_starts, states);
}

std::atomic<int> rows_setting{0};
std::atomic<int> patch_setting{0};

template <int CH, int ROWS, typename... Args>
void launch_patch(Args... args) {
  if (rasterize_patch_width() == kPatchWidth)
    launch_rows<CH, ROWS, kPatchWidth>(args...);
  else
    launch_rows<CH, ROWS, kTile>(args...);
}

template <int CH, typename... Args>
void launch(int64_t c, int64_t n, int64_t width, int64_t height, Args... args) {
  if (rasterize_rows(c, width, height) == 2)
    launch_patch<CH, 2>(c, n, width, height, args...);
  else
    launch_patch<CH, 1>(c, n, width, height, args...);
}

}  // namespace

int rasterize_rows_override(int rows) { return rows_setting.exchange(rows); }

int rasterize_rows_setting() { return rows_setting.load(std::memory_order_relaxed); }

int rasterize_patch_override(int width) { return patch_setting.exchange(width); }

int rasterize_patch_width() {
  const int forced = patch_setting.load(std::memory_order_relaxed);
  return forced != 0 ? forced : kPatchWidth;
}

void launch_rasterize_backward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* alpha,
    const float* depth, const uint16_t* last_ids, const float* background, const float* v_rgb,
    const float* v_depth, const float* v_alpha, float* v_means2d, float* v_conics,
    float* v_feats, float* v_opacities, float* v_abs, const int* seg_starts,
    const float* states, int64_t num_segments, cudaStream_t stream) {
  if (channels == 3)
    launch<3>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, alpha, depth, last_ids, background, v_rgb, v_depth, v_alpha, v_means2d,
              v_conics, v_feats, v_opacities, v_abs, seg_starts, states, num_segments, stream);
  else
    launch<4>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, alpha, depth, last_ids, background, v_rgb, v_depth, v_alpha, v_means2d,
              v_conics, v_feats, v_opacities, v_abs, seg_starts, states, num_segments, stream);
}

}  // namespace gsnb
