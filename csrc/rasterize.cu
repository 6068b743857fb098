// Per-tile front-to-back compositing of sorted splats, and its backward pass.
// One 16x16 thread block per (camera, tile); splats are staged through shared memory.
// CH is the number of blended channels: 3 (rgb) or 4 (rgb and depth).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host.h"
#include "ops.h"
#include "raster.cuh"
#include "reduce.cuh"

namespace gsnb {
namespace {

constexpr float kDepthAlphaMin = 1e-10f;
// Per splat of a batch, the block's summed gradients: means2d x y, conic a b c, the CH
// features, opacity, |means2d| x y; one padded row of 13 per splat.
constexpr int kGradSlots = 12;
constexpr int kGradStride = 13;

template <int CH>
__global__ void __launch_bounds__(kBlock) rasterize_forward_kernel(
    int num_cams, int num_opacities, int width, int height, int tiles_x, int tiles_y, int m,
    const float2* __restrict__ means2d, const float3* __restrict__ conics,
    const float* __restrict__ feats, const float* __restrict__ opacities, bool stored,
    const int* __restrict__ offsets, const int* __restrict__ flat_ids,
    const float* __restrict__ background, float* __restrict__ out_rgb,
    float* __restrict__ out_depth, float* __restrict__ out_alpha, int* __restrict__ last_ids) {
  const TilePixel p = tile_pixel(offsets, num_cams, width, height, tiles_x, tiles_y, m);
  __shared__ float3 s_xyo[kBlock];
  __shared__ float3 s_conic[kBlock];
  __shared__ float s_feat[kBlock * CH];

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
      stage_splat<CH>(k, p.tr, num_opacities, stored, flat_ids, means2d, conics, feats, opacities, s_xyo,
                      s_conic, s_feat);
    __syncthreads();
    const int count = min(kBlock, p.end - base);
    for (int t = 0; t < count && !done; ++t) {
      SplatAlpha hit;
      if (!splat_alpha(s_xyo[t], s_conic[t], p.px, p.py, hit)) continue;
      const float next_T = T * (1.f - hit.alpha);
      if (next_T < kTransmittanceMin) {
        done = true;
        break;
      }
      const float w = hit.alpha * T;
#pragma unroll
      for (int ch = 0; ch < CH; ++ch) acc[ch] += w * s_feat[t * CH + ch];
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
    last_ids[p.pix] = last;
  }
}

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
  __shared__ float3 s_xyo[kBlock];
  __shared__ float3 s_conic[kBlock];
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
      s_id[tr] = stage_splat<CH>(k, tr, num_opacities, stored, flat_ids, means2d, conics, feats, opacities,
                                 s_xyo, s_conic, s_feat);
#pragma unroll
    for (int s2 = 0; s2 < kGradStride; ++s2) s_grad[tr * kGradStride + s2] = 0.f;
    __syncthreads();
    const int count = min(kBlock, top - p.start);
    // Splats at or beyond this warp's last index cannot touch its pixels.
    for (int t = max(0, top - warp_last); t < count; ++t) {
      const int kk = top - 1 - t;
      const float3 co = s_conic[t];
      SplatAlpha hit;
      const bool valid = kk < last && splat_alpha(s_xyo[t], co, p.px, p.py, hit);
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
          v[0] = -v_sigma * (co.x * dx + co.y * dy);
          v[1] = -v_sigma * (co.y * dx + co.z * dy);
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
      const float o = s_xyo[tr].z;
      const float chain = stored ? o * (1.f - o) : 1.f;
#pragma unroll
      for (int s2 = 0; s2 < 8 + CH; ++s2)
        if (s2 < used && row[s2] != 0.f)
          atomicAdd(dst[s2], s2 == 5 + CH ? row[s2] * chain : row[s2]);
    }
  }
}

// Opacities are per Gaussian [N] (read at flat id % N) or per camera [C, N] (at flat id).
int64_t opacity_count(const at::Tensor& opacities, const at::Tensor& means2d) {
  const int64_t n = means2d.size(1), count = opacities.numel();
  TORCH_CHECK(count == n || count == means2d.size(0) * n,
              "rasterize: opacities must be [N] or [C, N] with C, N = ", means2d.size(0), ", ", n,
              ", got ", opacities.sizes());
  return count;
}

template <int CH>
void launch_forward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, bool stored, const at::Tensor& offsets,
    const at::Tensor& flat_ids, int64_t width, int64_t height, const float* background,
    at::Tensor& rgb, at::Tensor& depth, at::Tensor& alpha, at::Tensor& last_ids) {
  const int64_t c = means2d.size(0), n = opacity_count(opacities, means2d);
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid(tiles_x, tiles_y, c), block(kTile, kTile);
  rasterize_forward_kernel<CH><<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      c, n, width, height, tiles_x, tiles_y, flat_ids.size(0),
      reinterpret_cast<const float2*>(means2d.data_ptr<float>()),
      reinterpret_cast<const float3*>(conics.data_ptr<float>()), feats.data_ptr<float>(),
      opacities.data_ptr<float>(), stored, offsets.data_ptr<int>(), flat_ids.data_ptr<int>(),
      background, rgb.data_ptr<float>(), CH == 4 ? depth.data_ptr<float>() : nullptr,
      alpha.data_ptr<float>(), last_ids.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <int CH>
void launch_backward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, bool stored, const at::Tensor& offsets,
    const at::Tensor& flat_ids, int64_t width, int64_t height, const at::Tensor& alpha,
    const at::Tensor& depth, const at::Tensor& last_ids, const float* background,
    const at::Tensor& v_rgb,
    const at::Tensor& v_depth, const at::Tensor& v_alpha, at::Tensor& v_means2d,
    at::Tensor& v_conics, at::Tensor& v_feats, at::Tensor& v_opacities, float* v_abs) {
  const int64_t c = means2d.size(0), n = opacity_count(opacities, means2d);
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const dim3 grid(tiles_x, tiles_y, c), block(kTile, kTile);
  rasterize_backward_kernel<CH><<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
      c, n, width, height, tiles_x, tiles_y, flat_ids.size(0),
      reinterpret_cast<const float2*>(means2d.data_ptr<float>()),
      reinterpret_cast<const float3*>(conics.data_ptr<float>()), feats.data_ptr<float>(),
      opacities.data_ptr<float>(), stored, offsets.data_ptr<int>(), flat_ids.data_ptr<int>(),
      alpha.data_ptr<float>(), CH == 4 ? depth.data_ptr<float>() : nullptr,
      last_ids.data_ptr<int>(), background, v_rgb.data_ptr<float>(),
      CH == 4 && v_depth.numel() > 0 ? v_depth.data_ptr<float>() : nullptr,
      v_alpha.numel() > 0 ? v_alpha.data_ptr<float>() : nullptr,
      v_means2d.data_ptr<float>(), v_conics.data_ptr<float>(), v_feats.data_ptr<float>(),
      v_opacities.data_ptr<float>(), v_abs);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The [C, 3] background colours, or nullptr for none (black).
const float* background_ptr(const std::optional<at::Tensor>& backgrounds, const at::Tensor& like) {
  if (!backgrounds.has_value() || !backgrounds->defined()) return nullptr;
  const at::Tensor& bg = *backgrounds;
  check_input(bg, like.device(), "rasterize", "backgrounds");
  TORCH_CHECK(bg.dim() == 2 && bg.size(0) == like.size(0) && bg.size(1) == 3,
              "rasterize: backgrounds must be [C, 3] with C = ", like.size(0), ", got ",
              bg.sizes());
  return bg.data_ptr<float>();
}

}  // namespace

std::vector<at::Tensor> rasterize_forward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const std::optional<at::Tensor>& backgrounds, bool stored) {
  const c10::cuda::OptionalCUDAGuard guard(means2d.device());
  const int64_t c = means2d.size(0), ch = feats.size(-1);
  TORCH_CHECK(ch == 3 || ch == 4, "rasterize_forward blends 3 or 4 channels, got ", ch);
  const float* bg = background_ptr(backgrounds, means2d);
  auto f = means2d.options();
  auto rgb = at::empty({c, height, width, 3}, f);
  auto depth = ch == 4 ? at::empty({c, height, width, 1}, f) : at::empty({0}, f);
  auto alpha = at::empty({c, height, width, 1}, f);
  auto last_ids = at::empty({c, height, width}, f.dtype(at::kInt));
  if (ch == 3)
    launch_forward<3>(means2d, conics, feats, opacities, stored, offsets, flat_ids, width,
                      height, bg, rgb, depth, alpha, last_ids);
  else
    launch_forward<4>(means2d, conics, feats, opacities, stored, offsets, flat_ids, width,
                      height, bg, rgb, depth, alpha, last_ids);
  return {rgb, depth, alpha, last_ids};
}

std::vector<at::Tensor> rasterize_backward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const at::Tensor& alpha, const at::Tensor& depth,
    const at::Tensor& last_ids, const at::Tensor& v_rgb, const at::Tensor& v_depth,
    const at::Tensor& v_alpha, bool absgrad, const std::optional<at::Tensor>& backgrounds,
    bool stored) {
  const c10::cuda::OptionalCUDAGuard guard(means2d.device());
  const float* bg = background_ptr(backgrounds, means2d);
  auto v_means2d = at::zeros_like(means2d);
  auto v_conics = at::zeros_like(conics);
  auto v_feats = at::zeros_like(feats);
  auto v_opacities = at::zeros_like(opacities);
  auto v_abs = absgrad ? at::zeros_like(means2d) : at::Tensor();
  float* v_abs_ptr = absgrad ? v_abs.data_ptr<float>() : nullptr;
  if (feats.size(-1) == 3)
    launch_backward<3>(means2d, conics, feats, opacities, stored, offsets, flat_ids, width, height,
                       alpha, depth, last_ids, bg, v_rgb, v_depth, v_alpha, v_means2d,
                       v_conics, v_feats, v_opacities, v_abs_ptr);
  else
    launch_backward<4>(means2d, conics, feats, opacities, stored, offsets, flat_ids, width, height,
                       alpha, depth, last_ids, bg, v_rgb, v_depth, v_alpha, v_means2d,
                       v_conics, v_feats, v_opacities, v_abs_ptr);
  if (absgrad) return {v_means2d, v_conics, v_feats, v_opacities, v_abs};
  return {v_means2d, v_conics, v_feats, v_opacities};
}

}  // namespace gsnb
