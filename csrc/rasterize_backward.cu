// The backward pass of the per-tile compositing (rasterize_forward.cu; the host side:
// render_ops.cpp): gradients of the splats' means, conics, features and opacities.
// CH is the number of blended channels: 3 (rgb) or 4 (rgb and depth).
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "raster.cuh"
#include "reduce.cuh"

namespace gsnb {
namespace {

// Per splat of a batch, the block's summed gradients: means2d x y, conic a b c, the CH
// features, opacity, |means2d| x y; one padded row of 13 per splat.
constexpr int kGradSlots = 12;
constexpr int kGradStride = 13;

template <int CH>
__global__ void __launch_bounds__(kBlock) rasterize_backward_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, bool stored,
    const int* __restrict__ offsets, const int* __restrict__ flat_ids,
    const float* __restrict__ out_alpha, const float* __restrict__ out_depth,
    const int* __restrict__ last_ids, const float* __restrict__ background,
    const float* __restrict__ v_rgb, const float* __restrict__ v_depth,
    const float* __restrict__ v_out_alpha,
    float* __restrict__ v_means2d, float* __restrict__ v_conics, float* __restrict__ v_feats,
    float* __restrict__ v_opacities, float* __restrict__ v_means2d_abs) {
  const TilePixel p = tile_pixel(offsets, num_cams, width, height, tiles_x, tiles_y, m);
  const int tr = p.tr, lane = tr & 31;
  __shared__ int s_id[kBlock];
  __shared__ float4 s_geo[kBlock];
  __shared__ float2 s_bo[kBlock];
  __shared__ float s_feat[kBlock * CH];
  __shared__ float s_grad[kBlock * kGradStride];

  const float alpha_out = p.inside ? out_alpha[p.pix] : 0.f;
  const float T_final = 1.f - alpha_out;
  float T = T_final;
  const int last = p.inside ? last_ids[p.pix] : p.start;
  float v_out[CH], behind[CH];
#pragma unroll
  for (int ch = 0; ch < 3; ++ch) v_out[ch] = p.inside ? v_rgb[p.pix * 3 + ch] : 0.f;
  // Outputs the loss did not use have no gradient buffer (nullptr): zero.
  float v_a = p.inside && v_out_alpha != nullptr ? v_out_alpha[p.pix] : 0.f;
  // rgb = blend + (1 - alpha) * background: the background's share enters through alpha.
  if (background != nullptr) {
#pragma unroll
    for (int ch = 0; ch < 3; ++ch) v_a -= v_out[ch] * background[p.cam * 3 + ch];
  }
  if (CH == 4) {
    // depth = blended depth / max(alpha, eps): chain rule into the blend and into alpha.
    const float a = fmaxf(alpha_out, kDepthAlphaMin);
    const float vd = p.inside && v_depth != nullptr ? v_depth[p.pix] : 0.f;
    v_out[CH - 1] = vd / a;
    if (alpha_out >= kDepthAlphaMin) v_a -= vd * (p.inside ? out_depth[p.pix] : 0.f) / a;
  }
#pragma unroll
  for (int ch = 0; ch < CH; ++ch) behind[ch] = 0.f;  // sum of w f of the splats behind

  // The largest last index of the block and of this warp: nothing beyond contributed.
  __shared__ int s_last;
  if (tr == 0) s_last = p.start;
  __syncthreads();
  atomicMax(&s_last, last);
  const int warp_last = warp_all_reduce(last, MaxOp{});
  __syncthreads();
  const int block_end = s_last;

  const int slot = lane >> 1;
  for (int top = block_end; top > p.start; top -= kBlock) {
    __syncthreads();
    const int k = top - 1 - tr;
    if (k >= p.start)
      s_id[tr] = stage_splat<CH>(k, tr, num_opacities, stored, flat_ids, means2d, conics, feats,
                                 opacities, s_geo, s_bo, s_feat);
#pragma unroll
    for (int s2 = 0; s2 < kGradStride; ++s2) s_grad[tr * kGradStride + s2] = 0.f;
    __syncthreads();
    const int count = min(kBlock, top - p.start);
    // Splats at or beyond this warp's last index cannot touch its pixels.
    for (int t = max(0, top - warp_last); t < count; ++t) {
      const int kk = top - 1 - t;
      const float4 geo = s_geo[t];
      const float2 bo = s_bo[t];
      SplatAlpha hit;
      const bool valid = kk < last && splat_alpha(geo, bo, p.px, p.py, hit);
      if (!__any_sync(kFullMask, valid)) continue;
      float v[16];
#pragma unroll
      for (int s2 = 0; s2 < 16; ++s2) v[s2] = 0.f;
      if (valid) {
        const float alpha = hit.alpha, dx = hit.dx, dy = hit.dy;
        const float ra = 1.f / (1.f - alpha);
        T *= ra;
        const float w = alpha * T;
        float v_alpha = T_final * ra * v_a;
#pragma unroll
        for (int ch = 0; ch < CH; ++ch) {
          const float f = s_feat[t * CH + ch];
          v[5 + ch] = w * v_out[ch];
          v_alpha += (f * T - behind[ch] * ra) * v_out[ch];
          behind[ch] += w * f;
        }
        // Past the clamp alpha is the constant kAlphaMax: no gradient into the splat.
        if (hit.raw <= kAlphaMax) {
          v[5 + CH] = hit.vis * v_alpha;
          const float v_sigma = -alpha * v_alpha;
          v[0] = -v_sigma * (geo.z * dx + bo.x * dy);
          v[1] = -v_sigma * (bo.x * dx + geo.w * dy);
          v[2] = 0.5f * v_sigma * dx * dx;
          v[3] = v_sigma * dx * dy;
          v[4] = 0.5f * v_sigma * dy * dy;
          v[6 + CH] = fabsf(v[0]);
          v[7 + CH] = fabsf(v[1]);
        }
      }
      // Warp sum, then one shared-memory atomic per value: the block's warps meet there
      // and the batch is flushed to global memory once, below.
      const float total = warp_sum16(v, lane);
      if ((lane & 1) == 0 && slot < 8 + CH && total != 0.f)
        atomicAdd(&s_grad[t * kGradStride + slot], total);
    }
    __syncthreads();
    if (k >= p.start) {
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
      if (v_means2d_abs != nullptr) {
        dst[6 + CH] = v_means2d_abs + (int64_t)g * 2;
        dst[7 + CH] = dst[6 + CH] + 1;
      }
      const int used = v_means2d_abs != nullptr ? 8 + CH : 6 + CH;
      // A stored logit: d sigmoid(v) / dv = o (1 - o).
      const float o = s_bo[tr].y;
      const float chain = stored ? o * (1.f - o) : 1.f;
#pragma unroll
      for (int s2 = 0; s2 < 8 + CH; ++s2)
        if (s2 < used && row[s2] != 0.f)
          atomicAdd(dst[s2], s2 == 5 + CH ? row[s2] * chain : row[s2]);
    }
  }
}

template <int CH>
void launch(int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
            const float* means2d, const float* conics, const float* feats,
            const float* opacities, bool stored, const int* offsets, const int* flat_ids,
            const float* alpha, const float* depth, const int* last_ids,
            const float* background, const float* v_rgb, const float* v_depth,
            const float* v_alpha, float* v_means2d, float* v_conics, float* v_feats,
            float* v_opacities, float* v_abs, cudaStream_t stream) {
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid(tiles_x, tiles_y, c), block(kTile, kTile);
  rasterize_backward_kernel<CH><<<grid, block, 0, stream>>>(
      c, n, width, height, tiles_x, tiles_y, m, reinterpret_cast<const float2*>(means2d),
      reinterpret_cast<const float3*>(conics), feats, opacities, stored, offsets, flat_ids,
      alpha, depth, last_ids, background, v_rgb, v_depth, v_alpha, v_means2d, v_conics,
      v_feats, v_opacities, v_abs);
}

}  // namespace

void launch_rasterize_backward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* alpha,
    const float* depth, const int* last_ids, const float* background, const float* v_rgb,
    const float* v_depth, const float* v_alpha, float* v_means2d, float* v_conics,
    float* v_feats, float* v_opacities, float* v_abs, cudaStream_t stream) {
  if (channels == 3)
    launch<3>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, alpha, depth, last_ids, background, v_rgb, v_depth, v_alpha, v_means2d,
              v_conics, v_feats, v_opacities, v_abs, stream);
  else
    launch<4>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, alpha, depth, last_ids, background, v_rgb, v_depth, v_alpha, v_means2d,
              v_conics, v_feats, v_opacities, v_abs, stream);
}

}  // namespace gsnb
