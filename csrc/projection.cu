// EWA projection of 3D Gaussians to screen-space splats, fused with SH colour evaluation
// and the per-splat tile count; and its backward pass.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include "common.cuh"
#include "host.h"
#include "ops.h"
#include "sh.cuh"

namespace gsnb {
namespace {

struct Camera {
  float r[3][3];
  float t[3];
  float fx, fy, cx, cy;
};

__device__ __forceinline__ Camera load_camera(const float* viewmat, const float* K) {
  Camera cam;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
#pragma unroll
    for (int j = 0; j < 3; ++j) cam.r[i][j] = viewmat[i * 4 + j];
    cam.t[i] = viewmat[i * 4 + 3];
  }
  cam.fx = K[0];
  cam.fy = K[4];
  cam.cx = K[2];
  cam.cy = K[5];
  return cam;
}

// Everything the forward pass derives for one (camera, Gaussian); the backward recomputes it.
struct Splat {
  float p[3];        // centre in camera space
  float tx, ty;      // clamped x and y used by the Jacobian
  bool clamp_x, clamp_y;
  float J[2][3];
  float rq[3][3];    // rotation of the normalised quaternion
  float q[4];        // normalised quaternion
  float qnorm;
  float s[3];
  float covc[3][3];  // camera-space 3D covariance
  float a, b, c;     // 2D covariance with the low-pass
  float det;
  float a_raw, c_raw;  // its diagonal before the low-pass (read in antialiased mode only)
};

__device__ __forceinline__ bool compute_splat(
    const Camera& cam, const float* mean, const float* quat, const float* scale, bool stored,
    int width, int height, float near_plane, float far_plane, Splat& sp) {
#pragma unroll
  for (int i = 0; i < 3; ++i)
    sp.p[i] = cam.r[i][0] * mean[0] + cam.r[i][1] * mean[1] + cam.r[i][2] * mean[2] + cam.t[i];
  const float z = sp.p[2];
  if (!(z > near_plane && z < far_plane)) return false;
  const float rz = 1.f / z;
  const float mxp = (kFovClamp - 1.f) * 0.5f * width / cam.fx;
  const float myp = (kFovClamp - 1.f) * 0.5f * height / cam.fy;
  const float lim_x_pos = (width - cam.cx) / cam.fx + mxp;
  const float lim_x_neg = cam.cx / cam.fx + mxp;
  const float lim_y_pos = (height - cam.cy) / cam.fy + myp;
  const float lim_y_neg = cam.cy / cam.fy + myp;
  const float xz = sp.p[0] * rz, yz = sp.p[1] * rz;
  sp.clamp_x = !(xz <= lim_x_pos && xz >= -lim_x_neg);
  sp.clamp_y = !(yz <= lim_y_pos && yz >= -lim_y_neg);
  sp.tx = z * fminf(lim_x_pos, fmaxf(-lim_x_neg, xz));
  sp.ty = z * fminf(lim_y_pos, fmaxf(-lim_y_neg, yz));
  sp.J[0][0] = cam.fx * rz;
  sp.J[0][1] = 0.f;
  sp.J[0][2] = -cam.fx * sp.tx * rz * rz;
  sp.J[1][0] = 0.f;
  sp.J[1][1] = cam.fy * rz;
  sp.J[1][2] = -cam.fy * sp.ty * rz * rz;

  const float qn = sqrtf(quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] +
                         quat[3] * quat[3]);
  sp.qnorm = fmaxf(qn, 1e-12f);
#pragma unroll
  for (int i = 0; i < 4; ++i) sp.q[i] = quat[i] / sp.qnorm;
  const Mat3 rq = quat_to_rotmat(sp.q[0], sp.q[1], sp.q[2], sp.q[3]);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    sp.s[i] = scale_of(scale[i], stored);
#pragma unroll
    for (int j = 0; j < 3; ++j) sp.rq[i][j] = rq.m[i][j];
  }
  // M = W R S (camera-space), covc = M M^T
  float m[3][3];
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j)
      m[i][j] = (cam.r[i][0] * rq.m[0][j] + cam.r[i][1] * rq.m[1][j] + cam.r[i][2] * rq.m[2][j]) *
                sp.s[j];
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j)
      sp.covc[i][j] = m[i][0] * m[j][0] + m[i][1] * m[j][1] + m[i][2] * m[j][2];
  // cov2d = J covc J^T
  float jc[2][3];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j)
      jc[i][j] = sp.J[i][0] * sp.covc[0][j] + sp.J[i][1] * sp.covc[1][j] + sp.J[i][2] * sp.covc[2][j];
  sp.a = jc[0][0] * sp.J[0][0] + jc[0][1] * sp.J[0][1] + jc[0][2] * sp.J[0][2] + kLowpass;
  sp.b = jc[0][0] * sp.J[1][0] + jc[0][1] * sp.J[1][1] + jc[0][2] * sp.J[1][2];
  sp.c = jc[1][0] * sp.J[1][0] + jc[1][1] * sp.J[1][1] + jc[1][2] * sp.J[1][2] + kLowpass;
  sp.det = sp.a * sp.c - sp.b * sp.b;
  // Dead code (removed by the compiler) unless the antialiased kernels read it.
  sp.a_raw = jc[0][0] * sp.J[0][0] + jc[0][1] * sp.J[0][1] + jc[0][2] * sp.J[0][2];
  sp.c_raw = jc[1][0] * sp.J[1][0] + jc[1][1] * sp.J[1][1] + jc[1][2] * sp.J[1][2];
  return sp.det > 0.f;
}

// Antialiased mode (gsplat's rasterize_mode="antialiased", Mip-Splatting's 2D filter): the
// opacity factor sqrt(det(S) / det(S + kLowpass I)) of the 2D covariance S, so that the
// low-pass blurs a splat without adding energy; 0 for a degenerate S.
__device__ __forceinline__ float compensation_of(const Splat& sp) {
  const float ratio = (sp.a_raw * sp.c_raw - sp.b * sp.b) / sp.det;
  return ratio > 0.f ? sqrtf(ratio) : 0.f;
}

constexpr int kThreads = 128;

// Each Gaussian's SH coefficients (or RGB): one [N, K, 3] tensor (rest_k 0), or the first
// head_k bases and the other rest_k in two tensors, as 3DGS stores them (sh0 and shN).
struct Coeffs {
  const float* head;
  int head_k;
  const float* rest;
  int rest_k;
  // Entry e (basis e / 3, channel e % 3) of Gaussian g's coefficients.
  __device__ __forceinline__ float at(int64_t g, int e) const {
    const int h = head_k * 3;
    return e < h ? head[g * h + e] : rest[g * (rest_k * 3) + (e - h)];
  }
};

// The SH coefficients of a block's Gaussians are staged through shared memory: one
// padded row per thread, filled and drained by coalesced, cooperative copies.
__device__ __forceinline__ void stage_coeffs_in(
    const Coeffs& cf, float* rows, int row_len, int used, int64_t idx0, int count, int n) {
  const float inv = 1.f / (float)used;
  for (int e = threadIdx.x; e < count * used; e += blockDim.x) {
    const int r = __float2int_rz(((float)e + 0.5f) * inv);  // e / used, exact for e < 2^16
    const int k = e - r * used;
    const int64_t g = (idx0 + r) % n;
    rows[r * row_len + k] = cf.at(g, k);
  }
}

// Directions from the camera centre (-R^T t) to the Gaussian, in world space.
__device__ __forceinline__ void view_dir(const Camera& cam, const float* mean, float* dir) {
#pragma unroll
  for (int i = 0; i < 3; ++i)
    dir[i] = mean[i] + (cam.r[0][i] * cam.t[0] + cam.r[1][i] * cam.t[1] + cam.r[2][i] * cam.t[2]);
}

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

// AA: antialiased mode; opacities_cam [C, N] receives each splat's compensated opacity
// (activated), which binning and rasterization then read in place of opacities [N].
// At least 9 blocks per SM: at most 56 registers, as before the value checks (the
// antialiased kernel otherwise takes 63 and loses an eighth of its occupancy).
template <bool AA>
__global__ void __launch_bounds__(kThreads, 9) project_forward_kernel(
    int num_cams, int n, const float* __restrict__ means, const float* __restrict__ quats,
    const float* __restrict__ scales, const float* __restrict__ opacities, bool stored,
    Coeffs cf, int sh_degree,
    const float* __restrict__ viewmats, const float* __restrict__ Ks, int width, int height,
    float near_plane, float far_plane, float* __restrict__ means2d, float* __restrict__ conics,
    float* __restrict__ depths, int* __restrict__ radii, float* __restrict__ feats, int channels,
    int* __restrict__ tiles, float* __restrict__ opacities_cam,
    const float* __restrict__ backgrounds, int* __restrict__ problems) {
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
  if constexpr (AA) opacities_cam[idx] = 0.f;

  Splat sp;
  const bool ok = compute_splat(cam, means + gid * 3, quats + gid * 4, scales + gid * 3, stored,
                                width, height, near_plane, far_plane, sp);
  depths[idx] = sp.p[2];
  if (!ok) return;
  float r2;
  float opacity = opacity_of(opacities[gid], stored);
  // The culling and the box use the opacity the rasterizer will blend with (as gsplat).
  if constexpr (AA) opacity *= compensation_of(sp);
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
  const float A = sp.c / sp.det, B = -sp.b / sp.det, Cc = sp.a / sp.det;
  int count = 0;
  for_each_tile(mx, my, A, B, Cc, r2, (int)ry, width, height, [&](int, int) { ++count; });

  radii[idx * 2] = (int)rx;
  radii[idx * 2 + 1] = (int)ry;
  tiles[idx] = count;
  means2d[idx * 2] = mx;
  means2d[idx * 2 + 1] = my;
  conics[idx * 3] = A;
  conics[idx * 3 + 1] = B;
  conics[idx * 3 + 2] = Cc;
  if constexpr (AA) opacities_cam[idx] = opacity;
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

// With several cameras the per-camera gradients are summed atomically into zeroed
// buffers; with one camera every entry is stored exactly once.
__device__ __forceinline__ void put(float* dst, float v, bool atomic) {
  if (atomic) {
    if (v != 0.f) atomicAdd(dst, v);
  } else {
    *dst = v;
  }
}

// Coalesced write-back of a block's staged coefficient gradients into one [N, width / 3, 3]
// tensor whose row entries start at entry `first` of a Gaussian's row (zeros past `used`).
__device__ __forceinline__ void stage_coeffs_out(
    const float* rows, int row_len, int used, int first, int width, int64_t idx0, int count,
    int n, bool atomic, float* __restrict__ out) {
  const float inv = 1.f / (float)width;
  for (int e = threadIdx.x; e < count * width; e += blockDim.x) {
    const int r = __float2int_rz(((float)e + 0.5f) * inv);  // e / width, exact for e < 2^16
    const int k = e - r * width;
    const int64_t g = (idx0 + r) % n;
    const float v = first + k < used ? rows[r * row_len + first + k] : 0.f;
    put(out + g * width + k, v, atomic);
  }
}

// Gradients of one (camera, Gaussian) with respect to the Gaussian's parameters;
// row receives the SH coefficient gradients (it holds the coefficients on entry).
// AA: the splat's opacity was multiplied by comp = compensation_of(sp), whose gradient
// is v_comp.
template <bool AA>
__device__ __forceinline__ void splat_backward(
    const Camera& cam, const Splat& sp, const float* mean, int sh_degree, float* row,
    const float* conic, const float* v_mean2d, const float* v_conic, const float* vf,
    float v_depth, float comp, float v_comp, float* v_mean, float* v_quat, float* v_scale,
    float* v_rgb) {
  const float z = sp.p[2];
  const float rz = 1.f / z, rz2 = rz * rz, rz3 = rz2 * rz;

  // Colours (SH) -> coefficients and the view direction.
  float v_dir_world[3] = {0.f, 0.f, 0.f};
  if (sh_degree < 0) {
#pragma unroll
    for (int ch = 0; ch < 3; ++ch) v_rgb[ch] = vf[ch];
  } else {
    // The coefficients' gradients replace the coefficients in row.
    float d[3];
    view_dir(cam, mean, d);
    sh_to_color_vjp(sh_degree, d, [row](int e) { return row[e]; }, vf, row, v_dir_world);
  }
  // Conic -> 2D covariance: v_cov = -Q G Q with G the symmetric gradient of Q.
  const float A = conic[0], B = conic[1], Cc = conic[2];
  const float gA = v_conic[0], gB = 0.5f * v_conic[1], gC = v_conic[2];
  // Q G = [[A gA + B gB, A gB + B gC], [B gA + Cc gB, B gB + Cc gC]]
  const float qg00 = A * gA + B * gB, qg01 = A * gB + B * gC;
  const float qg10 = B * gA + Cc * gB, qg11 = B * gB + Cc * gC;
  float V[2][2];
  V[0][0] = -(qg00 * A + qg01 * B);
  V[0][1] = -(qg00 * B + qg01 * Cc);
  V[1][0] = -(qg10 * A + qg11 * B);
  V[1][1] = -(qg10 * B + qg11 * Cc);
  const float sym = 0.5f * (V[0][1] + V[1][0]);
  V[0][1] = V[1][0] = sym;
  if constexpr (AA) {
    // comp^2 = det(S) / det(S + eI) with Q = (S + eI)^-1 the conic:
    // d comp^2 / dS = (1 - comp^2) Q - e det(Q) I (gsplat's add_blur_vjp), and
    // d comp = d comp^2 / (2 comp); a degenerate splat (comp 0) gets none.
    if (comp > 0.f) {
      const float k = 0.5f * v_comp / comp;
      const float w = 1.f - comp * comp;
      const float e_det = kLowpass * (A * Cc - B * B);
      V[0][0] += k * (w * A - e_det);
      V[0][1] += k * w * B;
      V[1][0] += k * w * B;
      V[1][1] += k * (w * Cc - e_det);
    }
  }

  // cov2d = J covc J^T: v_covc = J^T V J, v_J = 2 V J covc.
  float vJ[2][3];
  {
    float vjc[2][3];  // V J
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 3; ++j) vjc[i][j] = V[i][0] * sp.J[0][j] + V[i][1] * sp.J[1][j];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 3; ++j)
        vJ[i][j] = 2.f * (vjc[i][0] * sp.covc[0][j] + vjc[i][1] * sp.covc[1][j] +
                          vjc[i][2] * sp.covc[2][j]);
  }
  float v_covc[3][3];
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j)
      v_covc[i][j] = sp.J[0][i] * (V[0][0] * sp.J[0][j] + V[0][1] * sp.J[1][j]) +
                     sp.J[1][i] * (V[1][0] * sp.J[0][j] + V[1][1] * sp.J[1][j]);

  // Camera-space centre: 2D mean, depth and the Jacobian.
  float vp[3];
  const float vmx = v_mean2d[0], vmy = v_mean2d[1];
  vp[0] = cam.fx * rz * vmx;
  vp[1] = cam.fy * rz * vmy;
  vp[2] = -cam.fx * sp.p[0] * rz2 * vmx - cam.fy * sp.p[1] * rz2 * vmy + v_depth;
  vp[2] += -cam.fx * rz2 * vJ[0][0] - cam.fy * rz2 * vJ[1][1];
  if (!sp.clamp_x) {
    vp[0] += -cam.fx * rz2 * vJ[0][2];
    vp[2] += 2.f * cam.fx * sp.tx * rz3 * vJ[0][2];
  } else {
    vp[2] += cam.fx * sp.tx * rz3 * vJ[0][2];
  }
  if (!sp.clamp_y) {
    vp[1] += -cam.fy * rz2 * vJ[1][2];
    vp[2] += 2.f * cam.fy * sp.ty * rz3 * vJ[1][2];
  } else {
    vp[2] += cam.fy * sp.ty * rz3 * vJ[1][2];
  }
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const float v = cam.r[0][i] * vp[0] + cam.r[1][i] * vp[1] + cam.r[2][i] * vp[2] +
                    v_dir_world[i];
    v_mean[i] = v;
  }

  // World covariance: v_sigma = W^T v_covc W; sigma = M M^T with M = R S: v_M = 2 v_sigma M.
  float tmp[3][3], vsig[3][3];
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j)
      tmp[i][j] = v_covc[i][0] * cam.r[0][j] + v_covc[i][1] * cam.r[1][j] + v_covc[i][2] * cam.r[2][j];
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j)
      vsig[i][j] = cam.r[0][i] * tmp[0][j] + cam.r[1][i] * tmp[1][j] + cam.r[2][i] * tmp[2][j];
  float G[3][3];  // gradient of the rotation matrix
#pragma unroll
  for (int i = 0; i < 3; ++i)
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      const float mij0 = sp.rq[0][j] * sp.s[j], mij1 = sp.rq[1][j] * sp.s[j],
                  mij2 = sp.rq[2][j] * sp.s[j];
      const float vm = 2.f * (vsig[i][0] * mij0 + vsig[i][1] * mij1 + vsig[i][2] * mij2);
      G[i][j] = vm * sp.s[j];
      tmp[i][j] = vm;  // v_M
    }
#pragma unroll
  for (int j = 0; j < 3; ++j) {
    const float vs = tmp[0][j] * sp.rq[0][j] + tmp[1][j] * sp.rq[1][j] + tmp[2][j] * sp.rq[2][j];
    v_scale[j] = vs;
  }
  const float w = sp.q[0], x = sp.q[1], y = sp.q[2], zq = sp.q[3];
  float vq[4];
  vq[0] = 2.f * (-zq * G[0][1] + y * G[0][2] + zq * G[1][0] - x * G[1][2] - y * G[2][0] + x * G[2][1]);
  vq[1] = 2.f * (y * G[0][1] + zq * G[0][2] + y * G[1][0] - 2.f * x * G[1][1] - w * G[1][2] +
                 zq * G[2][0] + w * G[2][1] - 2.f * x * G[2][2]);
  vq[2] = 2.f * (-2.f * y * G[0][0] + x * G[0][1] + w * G[0][2] + x * G[1][0] + zq * G[1][2] -
                 w * G[2][0] + zq * G[2][1] - 2.f * y * G[2][2]);
  vq[3] = 2.f * (-2.f * zq * G[0][0] - w * G[0][1] + x * G[0][2] + w * G[1][0] -
                 2.f * zq * G[1][1] + y * G[1][2] + x * G[2][0] + y * G[2][1]);
  const float dot = vq[0] * sp.q[0] + vq[1] * sp.q[1] + vq[2] * sp.q[2] + vq[3] * sp.q[3];
#pragma unroll
  for (int i = 0; i < 4; ++i) v_quat[i] = (vq[i] - dot * sp.q[i]) / sp.qnorm;
}

// AA: antialiased mode; v_opacities_cam [C, N] is the gradient of project_forward's
// opacities_cam, which gives v_opacities [N] and, through the compensation, the shape's.
template <bool AA>
__global__ void __launch_bounds__(kThreads) project_backward_kernel(
    int num_cams, int n, const float* __restrict__ means, const float* __restrict__ quats,
    const float* __restrict__ scales, const float* __restrict__ opacities,
    const float* __restrict__ v_opacities_cam, float* __restrict__ v_opacities, bool stored,
    Coeffs cf,
    int sh_degree, const float* __restrict__ viewmats, const float* __restrict__ Ks, int width,
    int height, float near_plane, float far_plane, const int* __restrict__ radii,
    const float* __restrict__ conics, const float* __restrict__ v_means2d,
    const float* __restrict__ v_conics, const float* __restrict__ v_feats, int channels,
    const float* __restrict__ v_depths, float* __restrict__ v_means, float* __restrict__ v_quats,
    float* __restrict__ v_scales, float* __restrict__ v_head, float* __restrict__ v_rest) {
  extern __shared__ float s_rows[];
  const int64_t total = (int64_t)num_cams * n;
  const int64_t idx0 = (int64_t)blockIdx.x * blockDim.x;
  const int64_t idx = idx0 + threadIdx.x;
  const bool atomic = num_cams > 1;
  const int used = sh_degree >= 0 ? num_bases(sh_degree) * 3 : 0;
  const int row_len = used + 1;
  const int count = (int)min((int64_t)blockDim.x, total - idx0);
  if (sh_degree >= 0) {
    stage_coeffs_in(cf, s_rows, row_len, used, idx0, count, n);
    __syncthreads();
  }
  float* row = s_rows + threadIdx.x * row_len;
  if (idx < total) {
    const int cid = idx / n;
    const int gid = idx % n;
    const Camera cam = load_camera(viewmats + cid * 16, Ks + cid * 9);
    Splat sp;
    float v_mean[3] = {0.f, 0.f, 0.f}, v_quat[4] = {0.f, 0.f, 0.f, 0.f};
    float v_scale[3] = {0.f, 0.f, 0.f}, v_rgb[3] = {0.f, 0.f, 0.f};
    float v_opacity = 0.f;
    const bool active =
        radii[idx * 2] > 0 && compute_splat(cam, means + gid * 3, quats + gid * 4,
                                            scales + gid * 3, stored, width, height,
                                            near_plane, far_plane, sp);
    if (active) {
      const float* vf = v_feats + idx * channels;
      const float v_depth =
          (v_depths != nullptr ? v_depths[idx] : 0.f) + (channels == 4 ? vf[3] : 0.f);
      float comp = 0.f, v_comp = 0.f;
      if constexpr (AA) {
        // opacity_cam = o comp: each factor's gradient is the other's value.
        const float o = opacity_of(opacities[gid], stored);
        const float v_oc = v_opacities_cam[idx];
        comp = compensation_of(sp);
        v_comp = v_oc * o;
        v_opacity = v_oc * comp * (stored ? o * (1.f - o) : 1.f);  // sigmoid' of a logit
      }
      splat_backward<AA>(cam, sp, means + gid * 3, sh_degree, row, conics + idx * 3,
                         v_means2d + idx * 2, v_conics + idx * 3, vf, v_depth, comp, v_comp,
                         v_mean, v_quat, v_scale, v_rgb);
      if (stored) {  // d exp(v) / dv = exp(v)
#pragma unroll
        for (int i = 0; i < 3; ++i) v_scale[i] *= sp.s[i];
      }
    } else if (sh_degree >= 0) {
      for (int k = 0; k < used; ++k) row[k] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < 3; ++i) put(v_means + gid * 3 + i, v_mean[i], atomic);
#pragma unroll
    for (int i = 0; i < 4; ++i) put(v_quats + gid * 4 + i, v_quat[i], atomic);
#pragma unroll
    for (int i = 0; i < 3; ++i) put(v_scales + gid * 3 + i, v_scale[i], atomic);
    if constexpr (AA) put(v_opacities + gid, v_opacity, atomic);
    if (sh_degree < 0) {
#pragma unroll
      for (int ch = 0; ch < 3; ++ch) put(v_head + gid * 3 + ch, v_rgb[ch], atomic);
    }
  }
  if (sh_degree < 0) return;
  __syncthreads();
  stage_coeffs_out(s_rows, row_len, used, 0, cf.head_k * 3, idx0, count, n, atomic, v_head);
  if (cf.rest_k > 0)
    stage_coeffs_out(s_rows, row_len, used, cf.head_k * 3, cf.rest_k * 3, idx0, count, n, atomic,
                     v_rest);
}

// The coefficients as the kernels read them: coeffs alone ([N, 3] RGB or [N, K, 3]), or
// coeffs [N, K0, 3] followed by rest [N, KR, 3].
Coeffs coeffs_view(const at::Tensor& coeffs, const std::optional<at::Tensor>& rest) {
  const bool split = rest.has_value() && rest->defined() && rest->numel() > 0;
  if (split) {
    check_input(*rest, coeffs.device(), "project", "rest coefficients");
    TORCH_CHECK(rest->dim() == 3 && rest->size(2) == 3 && rest->size(0) == coeffs.size(0),
                "project: rest coefficients must be [N, K, 3] with N = ", coeffs.size(0),
                ", got ", rest->sizes());
  }
  const int head_k = coeffs.dim() == 3 ? coeffs.size(1) : 1;
  return {coeffs.data_ptr<float>(), head_k, split ? rest->data_ptr<float>() : nullptr,
          split ? (int)rest->size(1) : 0};
}

}  // namespace

std::vector<at::Tensor> project_forward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& coeffs, const std::optional<at::Tensor>& rest,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree, bool with_depth, bool stored,
    bool antialiased, const std::optional<at::Tensor>& backgrounds, bool check_values) {
  const c10::cuda::OptionalCUDAGuard guard(means.device());
  const int64_t n = means.size(0), c = viewmats.size(0);
  const Coeffs cf = coeffs_view(coeffs, rest);
  const bool has_bg = backgrounds.has_value() && backgrounds->defined();
  if (has_bg) {
    check_input(*backgrounds, means.device(), "project", "backgrounds");
    TORCH_CHECK(backgrounds->numel() == c * 3, "project: backgrounds must be [C, 3] with C = ",
                c, ", got ", backgrounds->sizes());
  }
  auto f = means.options();
  auto means2d = at::empty({c, n, 2}, f);
  auto conics = at::empty({c, n, 3}, f);
  auto depths = at::empty({c, n}, f);
  const int channels = with_depth ? 4 : 3;
  auto feats = at::empty({c, n, channels}, f);
  auto radii = at::empty({c, n, 2}, f.dtype(at::kInt));
  auto tiles = at::empty({c, n}, f.dtype(at::kInt));
  auto opacities_cam = antialiased ? at::empty({c, n}, f) : at::empty({0}, f);
  // Zeroed by a fill on the stream; nothing on the host waits for it.
  auto problems = at::zeros({check_values ? 1 : 0}, f.dtype(at::kInt));
  // With checks, one thread per camera at least (the cameras are checked with no Gaussian).
  const int64_t threads = check_values ? std::max(c * n, c) : c * n;
  if (threads > 0) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    auto kernel = antialiased ? project_forward_kernel<true> : project_forward_kernel<false>;
    kernel<<<blocks_for(threads, kThreads), kThreads, 0, stream>>>(
        c, n, means.data_ptr<float>(), quats.data_ptr<float>(), scales.data_ptr<float>(),
        opacities.data_ptr<float>(), stored, cf, sh_degree, viewmats.data_ptr<float>(),
        Ks.data_ptr<float>(), width, height, near_plane, far_plane, means2d.data_ptr<float>(),
        conics.data_ptr<float>(), depths.data_ptr<float>(), radii.data_ptr<int>(),
        feats.data_ptr<float>(), channels, tiles.data_ptr<int>(),
        antialiased ? opacities_cam.data_ptr<float>() : nullptr,
        check_values && has_bg ? backgrounds->data_ptr<float>() : nullptr,
        check_values ? problems.data_ptr<int>() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {means2d, conics, depths, radii, feats, tiles, opacities_cam, problems};
}

std::vector<at::Tensor> project_backward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& coeffs, const std::optional<at::Tensor>& rest,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree, const at::Tensor& radii,
    const at::Tensor& conics, const at::Tensor& v_means2d, const at::Tensor& v_conics,
    const at::Tensor& v_feats, const at::Tensor& v_depths, const at::Tensor& v_opacities_cam,
    bool stored, bool antialiased) {
  const c10::cuda::OptionalCUDAGuard guard(means.device());
  const int64_t n = means.size(0), c = viewmats.size(0);
  const Coeffs cf = coeffs_view(coeffs, rest);
  // One camera: the kernel writes every entry; several: atomics into zeroed buffers.
  auto alloc = [&](const at::Tensor& t) { return c > 1 ? at::zeros_like(t) : at::empty_like(t); };
  auto v_means = alloc(means);
  auto v_quats = alloc(quats);
  auto v_scales = alloc(scales);
  auto v_coeffs = alloc(coeffs);
  // An empty rest [N, 0, 3] gets its (empty) gradient too; no rest, an unused placeholder.
  auto v_rest = rest.has_value() && rest->defined() ? alloc(*rest) : at::empty({0}, means.options());
  if (antialiased)
    TORCH_CHECK(v_opacities_cam.numel() == c * n && opacities.numel() == n,
                "project_backward: antialiased mode needs opacities [N] and v_opacities_cam "
                "[C, N], got ", opacities.sizes(), " and ", v_opacities_cam.sizes());
  auto v_opacities = antialiased ? alloc(opacities) : at::empty({0}, means.options());
  if (c * n > 0) {
    const size_t smem = sh_degree >= 0 ? kThreads * ((sh_degree + 1) * (sh_degree + 1) * 3 + 1) * 4 : 0;
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    auto kernel = antialiased ? project_backward_kernel<true> : project_backward_kernel<false>;
    kernel<<<blocks_for(c * n, kThreads), kThreads, smem, stream>>>(
        c, n, means.data_ptr<float>(), quats.data_ptr<float>(), scales.data_ptr<float>(),
        antialiased ? opacities.data_ptr<float>() : nullptr,
        antialiased ? v_opacities_cam.data_ptr<float>() : nullptr,
        antialiased ? v_opacities.data_ptr<float>() : nullptr, stored, cf, sh_degree, viewmats.data_ptr<float>(), Ks.data_ptr<float>(), width, height,
        near_plane, far_plane, radii.data_ptr<int>(), conics.data_ptr<float>(),
        v_means2d.data_ptr<float>(), v_conics.data_ptr<float>(), v_feats.data_ptr<float>(),
        v_feats.size(-1), v_depths.numel() > 0 ? v_depths.data_ptr<float>() : nullptr,
        v_means.data_ptr<float>(), v_quats.data_ptr<float>(), v_scales.data_ptr<float>(),
        v_coeffs.data_ptr<float>(), cf.rest_k > 0 ? v_rest.data_ptr<float>() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {v_means, v_quats, v_scales, v_coeffs, v_rest, v_opacities};
}

}  // namespace gsnb
