// Per-tile front-to-back compositing of sorted splats (the backward pass:
// rasterize_backward.cu; the host side: render_ops.cpp).
// One 16x16 thread block per (camera, tile); splats are staged through shared memory.
// CH is the number of blended channels: 3 (rgb) or 4 (rgb and depth).
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "raster.cuh"

namespace gsnb {
namespace {

template <int CH>
__global__ void __launch_bounds__(kBlock) rasterize_forward_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, bool stored,
    const int* __restrict__ offsets, const int* __restrict__ flat_ids,
    const float* __restrict__ background, float* __restrict__ out_rgb,
    float* __restrict__ out_depth, float* __restrict__ out_alpha,
    uint16_t* __restrict__ last_ids) {
  const TilePixel p = tile_pixel(offsets, num_cams, width, height, tiles_x, tiles_y, m);
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
}

template <int CH>
void launch(int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
            const float* means2d, const float* conics, const float* feats,
            const float* opacities, bool stored, const int* offsets, const int* flat_ids,
            const float* background, float* rgb, float* depth, float* alpha,
            uint16_t* last_ids, cudaStream_t stream) {
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid(tiles_x, tiles_y, c), block(kTile, kTile);
  rasterize_forward_kernel<CH><<<grid, block, 0, stream>>>(
      c, n, width, height, tiles_x, tiles_y, m, reinterpret_cast<const float2*>(means2d),
      reinterpret_cast<const float3*>(conics), feats, opacities, stored, offsets, flat_ids,
      background, rgb, depth, alpha, last_ids);
}

}  // namespace

void launch_rasterize_forward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* background, float* rgb,
    float* depth, float* alpha, uint16_t* last_ids, cudaStream_t stream) {
  if (channels == 3)
    launch<3>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, background, rgb, depth, alpha, last_ids, stream);
  else
    launch<4>(c, n, width, height, m, means2d, conics, feats, opacities, stored, offsets,
              flat_ids, background, rgb, depth, alpha, last_ids, stream);
}

}  // namespace gsnb
