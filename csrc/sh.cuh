// Real spherical harmonics of degree 0..3 with the constants of the original 3DGS code.
// color = max(sum_k b_k(u) * coeff_k + 0.5, 0), u the unit vector camera -> Gaussian;
// sh_to_color is the forward, sh_to_color_vjp beside it the backward.
#pragma once

#include <cuda_runtime.h>

namespace gsnb {

constexpr float kC0 = 0.28209479177387814f;
constexpr float kC1 = 0.4886025119029199f;
constexpr float kC2_0 = 1.0925484305920792f;
constexpr float kC2_1 = -1.0925484305920792f;
constexpr float kC2_2 = 0.31539156525252005f;
constexpr float kC2_3 = -1.0925484305920792f;
constexpr float kC2_4 = 0.5462742152960396f;
constexpr float kC3_0 = -0.5900435899266435f;
constexpr float kC3_1 = 2.890611442640554f;
constexpr float kC3_2 = -0.4570457994644658f;
constexpr float kC3_3 = 0.3731763325901154f;
constexpr float kC3_4 = -0.4570457994644658f;
constexpr float kC3_5 = 1.445305721320277f;
constexpr float kC3_6 = -0.5900435899266435f;

__device__ __forceinline__ int num_bases(int degree) { return (degree + 1) * (degree + 1); }

// Basis values b[0..(degree+1)^2) at the unit direction (x, y, z).
__device__ __forceinline__ void sh_basis(int degree, float x, float y, float z, float* b) {
  b[0] = kC0;
  if (degree < 1) return;
  b[1] = -kC1 * y;
  b[2] = kC1 * z;
  b[3] = -kC1 * x;
  if (degree < 2) return;
  const float xx = x * x, yy = y * y, zz = z * z;
  b[4] = kC2_0 * x * y;
  b[5] = kC2_1 * y * z;
  b[6] = kC2_2 * (2.f * zz - xx - yy);
  b[7] = kC2_3 * x * z;
  b[8] = kC2_4 * (xx - yy);
  if (degree < 3) return;
  b[9] = kC3_0 * y * (3.f * xx - yy);
  b[10] = kC3_1 * x * y * z;
  b[11] = kC3_2 * y * (4.f * zz - xx - yy);
  b[12] = kC3_3 * z * (2.f * zz - 3.f * xx - 3.f * yy);
  b[13] = kC3_4 * x * (4.f * zz - xx - yy);
  b[14] = kC3_5 * z * (xx - yy);
  b[15] = kC3_6 * x * (xx - 3.f * yy);
}

// Partial derivatives of each basis function with respect to x, y and z.
__device__ __forceinline__ void sh_basis_grad(
    int degree, float x, float y, float z, float* gx, float* gy, float* gz) {
  gx[0] = gy[0] = gz[0] = 0.f;
  if (degree < 1) return;
  gx[1] = 0.f;   gy[1] = -kC1; gz[1] = 0.f;
  gx[2] = 0.f;   gy[2] = 0.f;  gz[2] = kC1;
  gx[3] = -kC1;  gy[3] = 0.f;  gz[3] = 0.f;
  if (degree < 2) return;
  const float xx = x * x, yy = y * y, zz = z * z;
  gx[4] = kC2_0 * y;         gy[4] = kC2_0 * x;         gz[4] = 0.f;
  gx[5] = 0.f;                gy[5] = kC2_1 * z;         gz[5] = kC2_1 * y;
  gx[6] = -2.f * kC2_2 * x;  gy[6] = -2.f * kC2_2 * y;  gz[6] = 4.f * kC2_2 * z;
  gx[7] = kC2_3 * z;         gy[7] = 0.f;                gz[7] = kC2_3 * x;
  gx[8] = 2.f * kC2_4 * x;   gy[8] = -2.f * kC2_4 * y;  gz[8] = 0.f;
  if (degree < 3) return;
  gx[9] = kC3_0 * 6.f * x * y;
  gy[9] = kC3_0 * (3.f * xx - 3.f * yy);
  gz[9] = 0.f;
  gx[10] = kC3_1 * y * z;
  gy[10] = kC3_1 * x * z;
  gz[10] = kC3_1 * x * y;
  gx[11] = kC3_2 * (-2.f * x * y);
  gy[11] = kC3_2 * (4.f * zz - xx - 3.f * yy);
  gz[11] = kC3_2 * 8.f * y * z;
  gx[12] = kC3_3 * (-6.f * x * z);
  gy[12] = kC3_3 * (-6.f * y * z);
  gz[12] = kC3_3 * (6.f * zz - 3.f * xx - 3.f * yy);
  gx[13] = kC3_4 * (4.f * zz - 3.f * xx - yy);
  gy[13] = kC3_4 * (-2.f * x * y);
  gz[13] = kC3_4 * 8.f * x * z;
  gx[14] = kC3_5 * 2.f * x * z;
  gy[14] = kC3_5 * (-2.f * y * z);
  gz[14] = kC3_5 * (xx - yy);
  gx[15] = kC3_6 * (3.f * xx - 3.f * yy);
  gy[15] = kC3_6 * (-6.f * x * y);
  gz[15] = 0.f;
}

// The one normalisation of the view direction, forward and backward: u = dir / |dir|
// (|dir|^2 clamped to 1e-24, so a Gaussian at the camera centre gives no NaN); returns
// 1 / |dir|, the factor of the gradient's way back through it.
__device__ __forceinline__ float unit_dir(const float* dir, float* u) {
  const float inv = rsqrtf(fmaxf(dir[0] * dir[0] + dir[1] * dir[1] + dir[2] * dir[2], 1e-24f));
#pragma unroll
  for (int i = 0; i < 3; ++i) u[i] = dir[i] * inv;
  return inv;
}

// The unclamped colour 0.5 + sum_k basis[k] coeff(k * 3 + ch) for ch = 0, 1, 2, summed in
// order of k; coeff(e) reads entry e (basis e / 3, channel e % 3) of the coefficients.
template <typename Coeff>
__device__ __forceinline__ void sh_sum(int degree, const float* basis, const Coeff& coeff,
                                       float* acc) {
  const int nb = num_bases(degree);
#pragma unroll
  for (int ch = 0; ch < 3; ++ch) acc[ch] = 0.5f;
#pragma unroll
  for (int k = 0; k < 16; ++k)
    if (k < nb)
#pragma unroll
      for (int ch = 0; ch < 3; ++ch) acc[ch] += basis[k] * coeff(k * 3 + ch);
}

// color[3] = max(SH(dir / |dir|) + 0.5, 0) for the direction dir (any length). Returns
// whether the colour before the clamp is finite: false when a coefficient read is NaN/Inf
// (the clamp would hide a NaN); callers that ignore it pay nothing.
template <typename Coeff>
__device__ __forceinline__ bool sh_to_color(int degree, const float* dir, const Coeff& coeff,
                                            float* color) {
  float u[3], basis[16];
  unit_dir(dir, u);
  sh_basis(degree, u[0], u[1], u[2], basis);
  sh_sum(degree, basis, coeff, color);
  const bool finite = isfinite(color[0]) && isfinite(color[1]) && isfinite(color[2]);
#pragma unroll
  for (int ch = 0; ch < 3; ++ch) color[ch] = fmaxf(color[ch], 0.f);
  return finite;
}

// The vector-Jacobian product of sh_to_color: given v_color[3], the gradients of the
// coefficients, v_coeffs[k * 3 + ch] = b_k(u) v_color[ch] where the colour was not clamped
// (0 there), and of the direction, v_dir[3] = (I - u u^T) / |dir| (sum_k grad b_k(u) w_k)
// with w_k = sum_ch coeff_k,ch v_color[ch]. v_coeffs may alias the storage coeff reads:
// every coefficient is read before the first is written.
template <typename Coeff>
__device__ __forceinline__ void sh_to_color_vjp(int degree, const float* dir, const Coeff& coeff,
                                                const float* v_color, float* v_coeffs,
                                                float* v_dir) {
  float u[3], basis[16], acc[3], g[3];
  const float inv = unit_dir(dir, u);
  sh_basis(degree, u[0], u[1], u[2], basis);
  sh_sum(degree, basis, coeff, acc);
#pragma unroll
  for (int ch = 0; ch < 3; ++ch) g[ch] = acc[ch] >= 0.f ? v_color[ch] : 0.f;
  const int nb = num_bases(degree);
#pragma unroll
  for (int i = 0; i < 3; ++i) v_dir[i] = 0.f;
  if (degree > 0) {
    float gx[16], gy[16], gz[16];
    sh_basis_grad(degree, u[0], u[1], u[2], gx, gy, gz);
    float vu[3] = {0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 1; k < 16; ++k) {
      if (k < nb) {
        const float w = coeff(k * 3) * g[0] + coeff(k * 3 + 1) * g[1] + coeff(k * 3 + 2) * g[2];
        vu[0] += gx[k] * w;
        vu[1] += gy[k] * w;
        vu[2] += gz[k] * w;
      }
    }
    // Through u = dir / |dir|: drop the radial part, scale by 1 / |dir|.
    const float dot = vu[0] * u[0] + vu[1] * u[1] + vu[2] * u[2];
#pragma unroll
    for (int i = 0; i < 3; ++i) v_dir[i] = (vu[i] - dot * u[i]) * inv;
  }
#pragma unroll
  for (int k = 0; k < 16; ++k)
    if (k < nb)
#pragma unroll
      for (int ch = 0; ch < 3; ++ch) v_coeffs[k * 3 + ch] = basis[k] * g[ch];
}

}  // namespace gsnb
