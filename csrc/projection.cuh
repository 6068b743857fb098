// What the projection's forward (projection_forward.cu) and backward
// (projection_backward.cu) kernels share, so that the two cannot drift apart: the camera,
// the splat one (camera, Gaussian) gives, its antialiasing factor, the 3D filter's factor and
// the view direction.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"

namespace gsnb {

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
  float s_raw[3];    // scales as stored (activated); s is them through the 3D filter
  float s[3];
  float covc[3][3];  // camera-space 3D covariance
  float a, b, c;     // 2D covariance with the low-pass
  float det;
  float a_raw, c_raw;  // its diagonal before the low-pass (read in antialiased mode only)
};

__device__ __forceinline__ bool compute_splat(
    const Camera& cam, const float* mean, const float* quat, const float* scale, float var,
    bool stored, int width, int height, float near_plane, float far_plane, Splat& sp) {
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
    sp.s_raw[i] = scale_of(scale[i], stored);
    // The 3D filter (var > 0) widens each axis: s^2 = s_raw^2 + var.
    sp.s[i] = var > 0.f ? sqrtf(sp.s_raw[i] * sp.s_raw[i] + var) : sp.s_raw[i];
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
  // Dead code (removed by the compiler) unless the per-camera opacities' kernels read it.
  sp.a_raw = jc[0][0] * sp.J[0][0] + jc[0][1] * sp.J[0][1] + jc[0][2] * sp.J[0][2];
  sp.c_raw = jc[1][0] * sp.J[1][0] + jc[1][1] * sp.J[1][1] + jc[1][2] * sp.J[1][2];
  return sp.det > 0.f;
}

// The conic (inverse 2D covariance: A, B, C of A x^2 + 2 B x y + C y^2) of a splat. The
// backward recomputes it from the splat rather than keeping the forward's [C, N, 3].
__device__ __forceinline__ void conic_of(const Splat& sp, float* conic) {
  conic[0] = sp.c / sp.det;
  conic[1] = -sp.b / sp.det;
  conic[2] = sp.a / sp.det;
}

// Antialiased mode (gsplat's rasterize_mode="antialiased", Mip-Splatting's 2D filter): the
// opacity factor sqrt(det(S) / det(S + kLowpass I)) of the 2D covariance S, so that the
// low-pass blurs a splat without adding energy; 0 for a degenerate S.
__device__ __forceinline__ float compensation_of(const Splat& sp) {
  const float ratio = (sp.a_raw * sp.c_raw - sp.b * sp.b) / sp.det;
  return ratio > 0.f ? sqrtf(ratio) : 0.f;
}

// The 3D filter's opacity factor sqrt(prod(s_raw^2 / (s_raw^2 + var))) (Mip-Splatting's
// 3D smoothing keeps a Gaussian's energy); 1 without the filter (var 0).
__device__ __forceinline__ float filter_factor(const Splat& sp, float var) {
  if (!(var > 0.f)) return 1.f;
  float r = 1.f;
#pragma unroll
  for (int i = 0; i < 3; ++i) r *= sp.s_raw[i] * sp.s_raw[i] / (sp.s[i] * sp.s[i]);
  return sqrtf(r);
}

// Directions from the camera centre (-R^T t) to the Gaussian, in world space.
__device__ __forceinline__ void view_dir(const Camera& cam, const float* mean, float* dir) {
#pragma unroll
  for (int i = 0; i < 3; ++i)
    dir[i] = mean[i] + (cam.r[0][i] * cam.t[0] + cam.r[1][i] * cam.t[1] + cam.r[2][i] * cam.t[2]);
}

}  // namespace gsnb
