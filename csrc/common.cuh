// Shared constants and small device helpers of the gsnb rasterizer.
// The semantics match gsnb/raster/constants.py and the reference backend.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

#include "launch.h"

namespace gsnb {

constexpr int kBlock = kTile * kTile;
constexpr float kLowpass = 0.3f;
constexpr float kAlphaMax = 0.99f;
constexpr float kAlphaMin = 1.0f / 255.0f;
constexpr float kTransmittanceMin = 1e-4f;
constexpr float kFovClamp = 1.3f;
constexpr int kChannels = 4;  // r, g, b, depth

struct Mat3 {
  float m[3][3];
};

__device__ __forceinline__ Mat3 quat_to_rotmat(float w, float x, float y, float z) {
  Mat3 r;
  r.m[0][0] = 1.f - 2.f * (y * y + z * z);
  r.m[0][1] = 2.f * (x * y - w * z);
  r.m[0][2] = 2.f * (x * z + w * y);
  r.m[1][0] = 2.f * (x * y + w * z);
  r.m[1][1] = 1.f - 2.f * (x * x + z * z);
  r.m[1][2] = 2.f * (y * z - w * x);
  r.m[2][0] = 2.f * (x * z - w * y);
  r.m[2][1] = 2.f * (y * z + w * x);
  r.m[2][2] = 1.f - 2.f * (x * x + y * y);
  return r;
}

// Whether p may be read as float4: tensors are allocated 16-byte aligned, a view may not be.
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// A stored parameter as the renderer uses it. With `stored` the inputs are the parameters as
// 3DGS trains them (log-scales, opacity logits) and the kernels apply exp and the sigmoid.
__device__ __forceinline__ float opacity_of(float v, bool stored) {
  return stored ? 1.f / (1.f + expf(-v)) : v;
}
__device__ __forceinline__ float scale_of(float v, bool stored) { return stored ? expf(v) : v; }

// Half extents of the box where alpha = o * exp(-q/2) can reach 1/255, given the
// 2D covariance diagonal; returns false when the opacity alone is below 1/255.
__device__ __forceinline__ bool extent2(float opacity, float* out) {
  if (!(opacity >= kAlphaMin)) return false;
  *out = fmaxf(2.f * (logf(opacity) - logf(kAlphaMin)), 0.f);
  return true;
}

// Range of pixel columns [lo, hi] whose centres (i + 0.5) lie in [a, b], clamped to [0, n - 1].
__device__ __forceinline__ void pixel_range(float a, float b, int n, int* lo, int* hi) {
  float fl = ceilf(a - 0.5f);
  float fh = floorf(b - 0.5f);
  fl = fminf(fmaxf(fl, 0.f), (float)n);
  fh = fmaxf(fminf(fh, (float)(n - 1)), -1.f);
  *lo = (int)fl;
  *hi = (int)fh;
}

// For the ellipse q(d) = A dx^2 + 2 B dx dy + C dy^2 <= r2 centred at (mx, my),
// the span of x over the horizontal band of pixel centres y in [y0, y1].
// Returns false when the band misses the ellipse.
__device__ __forceinline__ bool ellipse_row_span(
    float A, float B, float C, float r2, float mx, float my, float y0, float y1,
    float* xl, float* xr) {
  const float det = A * C - B * B;  // > 0 for a positive definite conic
  const float ymax = sqrtf(r2 * A / det);
  float d0 = fmaxf(y0 - my, -ymax);
  float d1 = fminf(y1 - my, ymax);
  if (d0 > d1) return false;
  const float xmax = sqrtf(r2 * C / det);
  // The rightmost point of the ellipse sits where dq/ddy = 0: dy = -B/C * xmax.
  const float dy_r = -B / C * xmax;
  auto x_right = [&](float dy) {
    return (-B * dy + sqrtf(fmaxf(A * r2 - det * dy * dy, 0.f))) / A;
  };
  auto x_left = [&](float dy) {
    return (-B * dy - sqrtf(fmaxf(A * r2 - det * dy * dy, 0.f))) / A;
  };
  *xr = mx + ((dy_r >= d0 && dy_r <= d1) ? xmax : x_right(fminf(fmaxf(dy_r, d0), d1)));
  const float dy_l = -dy_r;
  *xl = mx + ((dy_l >= d0 && dy_l <= d1) ? -xmax : x_left(fminf(fmaxf(dy_l, d0), d1)));
  return true;
}

// The rows of tiles a splat can reach: its box's pixel rows [py_lo, py_hi] (empty when
// py_lo > py_hi) and the radius the tile walk uses.
struct TileWalk {
  float mx, my, A, B, C, r2e;
  int py_lo, py_hi, width;
  __device__ __forceinline__ int ty_lo() const { return py_lo / kTile; }
  __device__ __forceinline__ int ty_hi() const { return py_hi / kTile; }
  // The tiles [*tx_lo, *tx_hi] of tile row ty whose pixel centres can see alpha >= 1/255;
  // false when there are none.
  __device__ __forceinline__ bool row(int ty, int* tx_lo, int* tx_hi) const {
    const float y0 = fmaxf((float)(ty * kTile), (float)py_lo) + 0.5f;
    const float y1 = fminf((float)(ty * kTile + kTile - 1), (float)py_hi) + 0.5f;
    float xl, xr;
    if (!ellipse_row_span(A, B, C, r2e, mx, my, y0, y1, &xl, &xr)) return false;
    int px_lo, px_hi;
    pixel_range(xl, xr, width, &px_lo, &px_hi);
    if (px_lo > px_hi) return false;
    *tx_lo = px_lo / kTile;
    *tx_hi = px_hi / kTile;
    return true;
  }
};

// The tile walk of the ellipse q(d) = A dx^2 + 2 B dx dy + C dy^2 <= r2 centred at (mx, my)
// whose box has half height ry, in an image of width x height pixels.
__device__ __forceinline__ TileWalk tile_walk(float mx, float my, float A, float B, float C,
                                              float r2, int ry, int width, int height) {
  TileWalk w;
  w.mx = mx;
  w.my = my;
  w.A = A;
  w.B = B;
  w.C = C;
  // Slightly enlarged radius so that rounding never drops a pixel at the boundary.
  w.r2e = r2 * 1.0001f + 1e-4f;
  w.width = width;
  pixel_range(my - (float)ry, my + (float)ry, height, &w.py_lo, &w.py_hi);
  return w;
}

// Visit every tile whose pixel centres can see alpha >= 1/255 of this splat, row by row.
// f(tile_x, tile_y) is called for each. The projection counts tiles with it; the emission
// walks the same TileWalk rows (binning.cu), so the two agree tile for tile.
template <typename F>
__device__ __forceinline__ void for_each_tile(
    float mx, float my, float A, float B, float C, float r2, int ry, int width, int height,
    F&& f) {
  const TileWalk w = tile_walk(mx, my, A, B, C, r2, ry, width, height);
  if (w.py_lo > w.py_hi) return;
  for (int ty = w.ty_lo(); ty <= w.ty_hi(); ++ty) {
    int tx_lo, tx_hi;
    if (!w.row(ty, &tx_lo, &tx_hi)) continue;
    for (int tx = tx_lo; tx <= tx_hi; ++tx) f(tx, ty);
  }
}

}  // namespace gsnb
