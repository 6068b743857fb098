// The backward pass of the projection (projection_forward.cu): the gradients of the
// Gaussians' parameters from those of the splats (the host side: render_ops.cpp).
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "launch.h"
#include "projection.cuh"
#include "sh.cuh"

namespace gsnb {
namespace {

constexpr int kThreads = 128;

// The Gaussian of row r of a block whose first (camera, Gaussian) is Gaussian g0: rows wrap
// to the next camera at n (a 64-bit % per staged entry cost more than the copy itself).
__device__ __forceinline__ int gaussian_of(int g0, int r, int n) {
  int g = g0 + r;
  while (g >= n) g -= n;
  return g;
}

// Entries staged per thread and round trip: the loads of a batch are all in flight before
// the first is used (one at a time, the staging waited out the memory latency 48 times).
constexpr int kStageBatch = 8;

// The SH coefficients of a block's Gaussians are staged through shared memory: one
// padded row per thread, filled and drained by coalesced, cooperative copies.
__device__ __forceinline__ void stage_coeffs_in(
    const Coeffs& cf, float* rows, int row_len, int used, int64_t idx0, int count, int n) {
  const float inv = 1.f / (float)used;
  const int g0 = (int)(idx0 % n);
  const int entries = count * used;
  for (int e0 = threadIdx.x; e0 < entries; e0 += blockDim.x * kStageBatch) {
    float value[kStageBatch];
    int at[kStageBatch];
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int e = e0 + b * blockDim.x;
      at[b] = -1;
      if (e < entries) {
        const int r = __float2int_rz(((float)e + 0.5f) * inv);  // e / used, exact for e < 2^16
        const int k = e - r * used;
        at[b] = r * row_len + k;
        value[b] = cf.at(gaussian_of(g0, r, n), k);
      }
    }
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b)
      if (at[b] >= 0) rows[at[b]] = value[b];
  }
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
  const int g0 = (int)(idx0 % n);
  for (int e = threadIdx.x; e < count * width; e += blockDim.x) {
    const int r = __float2int_rz(((float)e + 0.5f) * inv);  // e / width, exact for e < 2^16
    const int k = e - r * width;
    const int64_t g = gaussian_of(g0, r, n);
    const float v = first + k < used ? rows[r * row_len + first + k] : 0.f;
    put(out + g * width + k, v, atomic);
  }
}

// Gradients of one (camera, Gaussian) with respect to the Gaussian's parameters;
// row receives the SH coefficient gradients (it holds the coefficients on entry).
// aa: the splat's opacity was multiplied by comp = compensation_of(sp), whose gradient
// is v_comp. v_scale receives the gradient of the scales the splat was drawn with (sp.s).
__device__ __forceinline__ void splat_backward(
    bool aa, const Camera& cam, const Splat& sp, const float* mean, int sh_degree, float* row,
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
  if (aa) {
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

// OC: opacities per camera (antialiased mode, aa, or the 3D filter, var3d [N] non-null);
// v_opacities_cam [C, N] is the gradient of project_forward's opacities_cam, which gives
// v_opacities [N] and, through the compensation and the filter's factor, the shape's.
template <bool OC>
__global__ void __launch_bounds__(kThreads) project_backward_kernel(
    int num_cams, int n, const float* __restrict__ means, const float* __restrict__ quats,
    const float* __restrict__ scales, const float* __restrict__ opacities,
    const float* __restrict__ v_opacities_cam, float* __restrict__ v_opacities, bool aa,
    const float* __restrict__ var3d, bool stored, Coeffs cf,
    int sh_degree, const float* __restrict__ viewmats, const float* __restrict__ Ks, int width,
    int height, float near_plane, float far_plane, const int* __restrict__ radii,
    const float* __restrict__ v_means2d,
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
    float var = 0.f;
    if constexpr (OC) var = var3d != nullptr ? var3d[gid] : 0.f;
    const bool active =
        radii[idx * 2] > 0 && compute_splat(cam, means + gid * 3, quats + gid * 4,
                                            scales + gid * 3, var, stored, width, height,
                                            near_plane, far_plane, sp);
    if (active) {
      const float* vf = v_feats + idx * channels;
      const float v_depth =
          (v_depths != nullptr ? v_depths[idx] : 0.f) + (channels == 4 ? vf[3] : 0.f);
      float comp = 1.f, v_comp = 0.f, filt = 1.f, v_filt = 0.f;
      if constexpr (OC) {
        // opacity_cam = o comp filt: each factor's gradient is the others' product.
        const float o = opacity_of(opacities[gid], stored);
        const float v_oc = v_opacities_cam[idx];
        if (aa) comp = compensation_of(sp);
        filt = filter_factor(sp, var);
        v_comp = v_oc * o * filt;
        v_filt = v_oc * o * comp;
        v_opacity = v_oc * comp * filt * (stored ? o * (1.f - o) : 1.f);  // sigmoid' of a logit
      }
      float conic[3];
      conic_of(sp, conic);  // as the forward computed it
      splat_backward(OC && aa, cam, sp, means + gid * 3, sh_degree, row, conic,
                     v_means2d + idx * 2, v_conics + idx * 3, vf, v_depth, comp, v_comp, v_mean,
                     v_quat, v_scale, v_rgb);
      if (OC && var > 0.f) {
        // s = sqrt(s_raw^2 + var): ds / ds_raw = s_raw / s; the factor's
        // d filt / ds_raw = filt var / (s_raw s^2), so d filt / d log s_raw = filt var / s^2.
#pragma unroll
        for (int i = 0; i < 3; ++i) {
          const float from_shape = v_scale[i] * sp.s_raw[i] / sp.s[i];
          const float from_factor = v_filt * filt * var / (sp.s[i] * sp.s[i]);  // per log s_raw
          if (stored)  // d exp(v) / dv = exp(v)
            v_scale[i] = from_shape * sp.s_raw[i] + from_factor;
          else
            v_scale[i] = from_shape + (sp.s_raw[i] != 0.f ? from_factor / sp.s_raw[i] : 0.f);
        }
      } else if (stored) {  // d exp(v) / dv = exp(v)
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
    if constexpr (OC) put(v_opacities + gid, v_opacity, atomic);
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

}  // namespace

void launch_project_backward(
    bool antialiased, int64_t c, int64_t n, const float* means, const float* quats,
    const float* scales, const float* opacities, const float* v_opacities_cam,
    float* v_opacities, const float* var3d, bool stored, const Coeffs& cf, int64_t sh_degree,
    const float* viewmats, const float* Ks, int64_t width, int64_t height, double near_plane,
    double far_plane, const int* radii, const float* v_means2d,
    const float* v_conics, const float* v_feats, int64_t channels, const float* v_depths,
    float* v_means, float* v_quats, float* v_scales, float* v_head, float* v_rest,
    cudaStream_t stream) {
  const size_t smem = sh_degree >= 0 ? kThreads * ((sh_degree + 1) * (sh_degree + 1) * 3 + 1) * 4 : 0;
  const bool oc = antialiased || var3d != nullptr;
  auto kernel = oc ? project_backward_kernel<true> : project_backward_kernel<false>;
  kernel<<<blocks_for(c * n, kThreads), kThreads, smem, stream>>>(
      c, n, means, quats, scales, opacities, v_opacities_cam, v_opacities, antialiased, var3d,
      stored, cf, sh_degree,
      viewmats, Ks, width, height, near_plane, far_plane, radii, v_means2d, v_conics,
      v_feats, channels, v_depths, v_means, v_quats, v_scales, v_head, v_rest);
}

}  // namespace gsnb
