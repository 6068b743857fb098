// Real spherical harmonics of degree 0..3 with the constants of the original 3DGS code.
// color = max(sum_k b_k(dir) * coeff_k + 0.5, 0), dir the unit vector camera -> Gaussian.
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

}  // namespace gsnb
