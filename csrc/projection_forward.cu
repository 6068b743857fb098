// EWA projection of 3D Gaussians to screen-space splats, fused with SH colour evaluation,
// the per-splat tile count and the optional value checks (the host side: render_ops.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "projection.cuh"
#include "sh.cuh"

namespace gsnb {
namespace {

constexpr int kThreads = 128;

// Value checks (check_values): bits of the problems flag, kept in step with
// gsnb/raster/validate.py's PROBLEM_BITS. A bit is set with atomicOr only where a problem is
// found, so a clean render writes nothing and the host reads the flag when it chooses.
enum Problem : int {
  kBadMeans = 1 << 0,       // NaN/Inf
  kBadQuats = 1 << 1,
  kBadScales = 1 << 2,
  kBadOpacities = 1 << 3,
  kBadColors = 1 << 4,      // colours, SH coefficients or sh0
  kBadRest = 1 << 5,        // shN
  kBadViewmats = 1 << 6,
  kBadKs = 1 << 7,
  kBadBackgrounds = 1 << 8,
  kOpacityRange = 1 << 9,   // activated opacities outside [0, 1]
  kNegativeScale = 1 << 10, // linear scales below 0
  kFocal = 1 << 11,         // fx or fy not positive
};

__device__ __forceinline__ int nonfinite(const float* v, int count, int bit) {
  bool bad = false;
  for (int i = 0; i < count; ++i) bad |= !isfinite(v[i]);
  return bad ? bit : 0;
}

// The problems of one Gaussian's means, quats, scales and opacity (the values the
// projection reads; stored log-scales and logits may take any finite value).
__device__ __forceinline__ int gaussian_problems(const float* mean, const float* quat,
                                                 const float* scale, float opacity,
                                                 bool stored) {
  int bits = nonfinite(mean, 3, kBadMeans) | nonfinite(quat, 4, kBadQuats) |
             nonfinite(scale, 3, kBadScales) | nonfinite(&opacity, 1, kBadOpacities);
  if (!stored) {
    if (!(opacity >= 0.f && opacity <= 1.f) && isfinite(opacity)) bits |= kOpacityRange;
    if (scale[0] < 0.f || scale[1] < 0.f || scale[2] < 0.f) bits |= kNegativeScale;
  }
  return bits;
}

// The problems of camera c: every entry of its viewmat [4, 4], K [3, 3] and background [3].
__device__ __forceinline__ int camera_problems(const float* viewmat, const float* K,
                                               const float* background) {
  int bits = nonfinite(viewmat, 16, kBadViewmats) | nonfinite(K, 9, kBadKs);
  if (background != nullptr) bits |= nonfinite(background, 3, kBadBackgrounds);
  if (!(K[0] > 0.f && K[4] > 0.f) && isfinite(K[0]) && isfinite(K[4])) bits |= kFocal;
  return bits;
}

__device__ __forceinline__ void report(int* problems, int bits) {
  if (bits != 0) atomicOr(problems, bits);
}

// OC: opacities per camera. opacities_cam [C, N] receives each splat's activated opacity
// times its antialiasing compensation (aa) and its 3D filter factor (var3d [N], the
// filter's variances, or null), which binning and rasterization then read in place of
// opacities [N] (the launcher takes OC whenever var3d is given).
// Classic: at least 9 blocks per SM, at most 56 registers, as before the value checks. OC
// (compensation and filter factor on top): 8 blocks, 64 registers (at 56 it spilled 44 bytes).
template <bool OC>
__global__ void __launch_bounds__(kThreads, OC ? 8 : 9) project_forward_kernel(
    int num_cams, int n, const float* __restrict__ means, const float* __restrict__ quats,
    const float* __restrict__ scales, const float* __restrict__ opacities, bool stored,
    Coeffs cf, int sh_degree,
    const float* __restrict__ viewmats, const float* __restrict__ Ks, int width, int height,
    float near_plane, float far_plane, float* __restrict__ means2d, float* __restrict__ conics,
    float* __restrict__ depths, int* __restrict__ radii, float* __restrict__ feats, int channels,
    int* __restrict__ tiles, float* __restrict__ opacities_cam, bool aa,
    const float* __restrict__ var3d, const float* __restrict__ backgrounds,
    int* __restrict__ problems) {
  const int64_t total = (int64_t)num_cams * n;
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  // problems (null: no checks): thread c checks camera c, the threads of camera 0 every
  // Gaussian's means, quats, scales and opacity, and each visible splat the colours it reads.
  if (problems != nullptr && idx < num_cams)
    report(problems, camera_problems(viewmats + idx * 16, Ks + idx * 9,
                                     backgrounds != nullptr ? backgrounds + idx * 3 : nullptr));
  if (idx >= total) return;
  const int cid = idx / n;
  const int gid = idx % n;
  const Camera cam = load_camera(viewmats + cid * 16, Ks + cid * 9);
  if (problems != nullptr && cid == 0)
    report(problems, gaussian_problems(means + gid * 3, quats + gid * 4, scales + gid * 3,
                                       opacities[gid], stored));

  radii[idx * 2] = 0;
  radii[idx * 2 + 1] = 0;
  tiles[idx] = 0;
  means2d[idx * 2] = 0.f;
  means2d[idx * 2 + 1] = 0.f;
  conics[idx * 3] = conics[idx * 3 + 1] = conics[idx * 3 + 2] = 0.f;
  float* feat = feats + idx * channels;
  for (int ch = 0; ch < channels; ++ch) feat[ch] = 0.f;
  if constexpr (OC) opacities_cam[idx] = 0.f;

  Splat sp;
  float var = 0.f;
  if constexpr (OC) var = var3d != nullptr ? var3d[gid] : 0.f;
  const bool ok = compute_splat(cam, means + gid * 3, quats + gid * 4, scales + gid * 3, var,
                                stored, width, height, near_plane, far_plane, sp);
  depths[idx] = sp.p[2];
  if (!ok) return;
  float r2;
  float opacity = opacity_of(opacities[gid], stored);
  // The culling and the box use the opacity the rasterizer will blend with (as gsplat).
  if constexpr (OC) opacity *= (aa ? compensation_of(sp) : 1.f) * filter_factor(sp, var);
  if (!extent2(opacity, &r2)) return;
  const float rz = 1.f / sp.p[2];
  const float mx = cam.fx * sp.p[0] * rz + cam.cx;
  const float my = cam.fy * sp.p[1] * rz + cam.cy;
  // At least 1 px: an opacity of exactly 1/255 still reaches the threshold at its centre.
  const float rx = fminf(fmaxf(ceilf(sqrtf(r2 * sp.a)), 1.f), 1073741824.f);
  const float ry = fminf(fmaxf(ceilf(sqrtf(r2 * sp.c)), 1.f), 1073741824.f);
  // Visible when the box overlaps the image (as gsplat counts views for densification),
  // even where it holds no pixel centre: such a splat has no tiles and gets no gradient.
  if (!(mx + rx > 0.f && mx - rx < (float)width && my + ry > 0.f && my - ry < (float)height))
    return;
  float conic[3];
  conic_of(sp, conic);
  int count = 0;
  for_each_tile(mx, my, conic[0], conic[1], conic[2], r2, (int)ry, width, height,
                [&](int, int) { ++count; });

  radii[idx * 2] = (int)rx;
  radii[idx * 2 + 1] = (int)ry;
  tiles[idx] = count;
  means2d[idx * 2] = mx;
  means2d[idx * 2 + 1] = my;
  conics[idx * 3] = conic[0];
  conics[idx * 3 + 1] = conic[1];
  conics[idx * 3 + 2] = conic[2];
  if constexpr (OC) opacities_cam[idx] = opacity;
  if (channels == 4) feat[3] = sp.p[2];

  if (sh_degree < 0) {
    float rgb[3];
#pragma unroll
    for (int ch = 0; ch < 3; ++ch) feat[ch] = rgb[ch] = cf.at(gid, ch);
    if (problems != nullptr) report(problems, nonfinite(rgb, 3, kBadColors));
    return;
  }
  // Only visible splats read their coefficients; one Gaussian's lie in a few cache lines.
  float dir[3], rgb[3];
  view_dir(cam, means + gid * 3, dir);
  const bool finite = sh_to_color(sh_degree, dir, [&](int e) { return cf.at(gid, e); }, rgb);
  if (problems != nullptr && !finite) {
    // Rare: find which of the coefficients read (sh0 or shN) holds the NaN/Inf.
    int bad = 0;
    for (int e = 0; e < num_bases(sh_degree) * 3; ++e)
      if (!isfinite(cf.at(gid, e))) bad |= e < cf.head_k * 3 ? kBadColors : kBadRest;
    report(problems, bad);
  }
#pragma unroll
  for (int ch = 0; ch < 3; ++ch) feat[ch] = rgb[ch];
}

}  // namespace

void launch_project_forward(
    bool antialiased, int64_t threads, int64_t c, int64_t n, const float* means,
    const float* quats, const float* scales, const float* opacities, bool stored,
    const Coeffs& cf, int64_t sh_degree, const float* viewmats, const float* Ks, int64_t width,
    int64_t height, double near_plane, double far_plane, float* means2d, float* conics,
    float* depths, int* radii, float* feats, int channels, int* tiles, float* opacities_cam,
    const float* var3d, const float* backgrounds, int* problems, cudaStream_t stream) {
  const bool oc = antialiased || var3d != nullptr;
  auto kernel = oc ? project_forward_kernel<true> : project_forward_kernel<false>;
  kernel<<<blocks_for(threads, kThreads), kThreads, 0, stream>>>(
      c, n, means, quats, scales, opacities, stored, cf, sh_degree, viewmats, Ks, width, height,
      near_plane, far_plane, means2d, conics, depths, radii, feats, channels, tiles,
      opacities_cam, antialiased, var3d, backgrounds, problems);
}

}  // namespace gsnb
