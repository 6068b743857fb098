// Fused SSIM (Wang et al. 2004) with an 11x11 Gaussian window, for the training loss.
// Images are [B, H, W, C] float32; the second (the photo) may be uint8, read as torch's
// bytes_to_float makes it on a GPU. The forward pass stages (x, y) pairs in shared memory,
// blurs the five local moments (mu_x, mu_y, E[x^2], E[y^2], E[xy]) along rows from them
// (the products made as they are read) and then down columns, and writes the SSIM map
// with its derivatives with respect to mu_x, E[x^2] and E[xy]; the backward pass blurs
// those derivatives (times the incoming gradient) back onto the pixels of x.
// Output pixel (oy, ox) averages input rows oy - pad .. oy - pad + 10 (zero outside).
// A block covers kSsimTile columns and kSsimRows rows; each thread blurs two adjacent columns
// along rows and two adjacent rows down columns, so that one window's twelve shared-memory
// reads serve two outputs.
//
// The same two kernels also give the 3DGS photometric loss (1 - l) L1 + l (1 - SSIM) without
// an SSIM map: the forward pass sums |x - y|, (x - y)^2 and SSIM per block, a one-block pass
// finishes loss, L1, SSIM and MSE, and the backward pass adds the L1 and MSE terms to the
// SSIM gradient, all weighted by the incoming gradients read from device memory.
// (The host side: train_ops.cpp.)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "launch.h"
#include "reduce.cuh"

namespace gsnb {
namespace {

constexpr int kSpanX = kSsimTile + kWin - 1;  // a tile's columns and its window's reach
constexpr int kSpanY = kSsimRows + kWin - 1;   // its rows and their reach
constexpr int kThreads = kSsimTile * kSsimTile;

struct Window {
  float w[kWin];
};

__device__ __forceinline__ int64_t at_pixel(int b, int y, int x, int c, int h, int w, int ch) {
  return ((static_cast<int64_t>(b) * h + y) * w + x) * ch + c;
}

__device__ __forceinline__ float value_at(const float* __restrict__ p, int64_t at) { return p[at]; }

// An 8-bit value as torch's bytes_to_float gives it on a GPU: v * (1 / 255) in float32
// (its division by a host scalar multiplies by the reciprocal), rounded on its own: never
// contracted with what follows into one multiply-add.
__device__ __forceinline__ float value_at(const uint8_t* __restrict__ p, int64_t at) {
  return __fmul_rn(static_cast<float>(p[at]), 1.0f / 255.0f);
}

// Two adjacent taps of a blur from kWin + 1 consecutive values v(0) .. v(kWin):
// a0 += sum_k w[k] v(k), a1 += sum_k w[k] v(k + 1); each value is read once.
template <typename Read>
__device__ __forceinline__ void blur_pair(const Window& win, Read v, float& a0, float& a1) {
#pragma unroll
  for (int k = 0; k <= kWin; ++k) {
    const float x = v(k);
    if (k < kWin) a0 += win.w[k] * x;
    if (k > 0) a1 += win.w[k - 1] * x;
  }
}

// Horizontal pass: out[t][r][j] = sum_k w[k] in[t][r][j + k] for every row of the span,
// two columns j, j + 1 per thread and step.
template <int T>
__device__ __forceinline__ void blur_rows(
    const float (*in)[kSpanY][kSpanX + 1], float (*out)[kSpanY][kSsimTile + 1],
    const Window& win) {
  constexpr int kPairs = kSsimTile / 2;
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpanY * kPairs; i += kThreads) {
    const int r = i / kPairs, j = 2 * (i % kPairs);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float a0 = 0.f, a1 = 0.f;
      blur_pair(win, [&](int k) { return in[t][r][j + k]; }, a0, a1);
      out[t][r][j] = a0;
      out[t][r][j + 1] = a1;
    }
  }
}

// The forward's horizontal pass: out[t][r][j] = sum_k w[k] m_t(in[r][j + k]) for the five
// moments m = (x, y, x^2, y^2, xy) of each staged pair, two columns j, j + 1 per thread and
// step; the same sums, in the same order, as blur_rows over the five products.
__device__ __forceinline__ void blur_moment_rows(const float2 (*in)[kSpanX + 1],
                                                 float (*out)[kSpanY][kSsimTile + 1],
                                                 const Window& win) {
  constexpr int kPairs = kSsimTile / 2;
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpanY * kPairs; i += kThreads) {
    const int r = i / kPairs, j = 2 * (i % kPairs);
    float a0[5] = {0.f, 0.f, 0.f, 0.f, 0.f}, a1[5] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k <= kWin; ++k) {
      const float2 v = in[r][j + k];
      const float m[5] = {v.x, v.y, v.x * v.x, v.y * v.y, v.x * v.y};
#pragma unroll
      for (int t = 0; t < 5; ++t) {
        if (k < kWin) a0[t] += win.w[k] * m[t];
        if (k > 0) a1[t] += win.w[k - 1] * m[t];
      }
    }
#pragma unroll
    for (int t = 0; t < 5; ++t) {
      out[t][r][j] = a0[t];
      out[t][r][j + 1] = a1[t];
    }
  }
}

// Vertical pass for a thread's two rows 2 threadIdx.y and 2 threadIdx.y + 1 of column
// threadIdx.x: m0[t], m1[t] = the blurred h[t] there.
static_assert(kSsimRows == 2 * kSsimTile, "a block's kSsimTile thread rows take two rows each");
template <int T>
__device__ __forceinline__ void blur_columns(const float (*h)[kSpanY][kSsimTile + 1],
                                             const Window& win, float (&m0)[T], float (&m1)[T]) {
  const int i = 2 * threadIdx.y, j = threadIdx.x;
#pragma unroll
  for (int t = 0; t < T; ++t) {
    m0[t] = 0.f;
    m1[t] = 0.f;
    blur_pair(win, [&](int k) { return h[t][i + k][j]; }, m0[t], m1[t]);
  }
}

// map (or partials) may be nullptr; partials [blocks, 3]: this block's sums of SSIM over its
// outputs and of |x - y| and (x - y)^2 over its inputs (the last tile row and column also
// take the input rows and columns past the last output).
template <typename Y>
__global__ void __launch_bounds__(kThreads) ssim_forward_kernel(
    const float* __restrict__ x, const Y* __restrict__ y, Shape s, Window win, float c1,
    float c2, float* __restrict__ map, float* __restrict__ d_mu, float* __restrict__ d_xx,
    float* __restrict__ d_xy, float* __restrict__ partials) {
  // in: (x, y) over the span (a row of 27 pairs: the two half-warps' rows of a 64-bit read
  // fall on different banks); h: x, y, x^2, y^2, xy blurred along rows.
  __shared__ float2 in[kSpanY][kSpanX + 1];
  __shared__ float h[5][kSpanY][kSsimTile + 1];
  const int b = blockIdx.z / s.C, c = blockIdx.z % s.C;
  const int oy0 = blockIdx.y * kSsimRows, ox0 = blockIdx.x * kSsimTile;
  const int y0 = oy0 - s.pad, x0 = ox0 - s.pad;
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpanY * kSpanX; i += kThreads) {
    const int r = i / kSpanX, q = i % kSpanX;
    const int py = y0 + r, px = x0 + q;
    float u = 0.f, v = 0.f;
    if (py >= 0 && py < s.H && px >= 0 && px < s.W) {
      const int64_t at = at_pixel(b, py, px, c, s.H, s.W, s.C);
      u = x[at];
      v = value_at(y, at);
    }
    in[r][q] = make_float2(u, v);
  }
  __syncthreads();
  blur_moment_rows(in, h, win);
  __syncthreads();
  float m[2][5];
  blur_columns<5>(h, win, m[0], m[1]);
  float ssim_sum = 0.f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int oy = oy0 + 2 * threadIdx.y + r, ox = ox0 + threadIdx.x;
    if (oy >= s.Ho || ox >= s.Wo) continue;
    const float mu1 = m[r][0], mu2 = m[r][1];
    const float s11 = m[r][2] - mu1 * mu1, s22 = m[r][3] - mu2 * mu2, s12 = m[r][4] - mu1 * mu2;
    const float a1 = 2.f * mu1 * mu2 + c1, a2 = 2.f * s12 + c2;
    const float b1 = mu1 * mu1 + mu2 * mu2 + c1, b2 = s11 + s22 + c2;
    const float inv = 1.f / (b1 * b2);
    const float ssim = a1 * a2 * inv;
    ssim_sum += ssim;
    const int64_t at = at_pixel(b, oy, ox, c, s.Ho, s.Wo, s.C);
    if (map != nullptr) map[at] = ssim;
    if (d_mu != nullptr) {
      // Partial derivatives holding the variances fixed, then through s11 = E[x^2] - mu1^2
      // and s12 = E[xy] - mu1 mu2 to the blurred moments themselves.
      const float ds11 = -ssim / b2;
      const float ds12 = 2.f * a1 * inv;
      const float dmu1 = 2.f * mu2 * a2 * inv - ssim * 2.f * mu1 / b1;
      d_mu[at] = dmu1 - 2.f * mu1 * ds11 - mu2 * ds12;
      d_xx[at] = ds11;
      d_xy[at] = ds12;
    }
  }
  if (partials == nullptr) return;
  // This block's input pixels: its tile, stretched to the image edge in the last row/column.
  const int rows = (blockIdx.y + 1 == gridDim.y ? s.H : min(s.H, oy0 + kSsimRows)) - oy0;
  const int cols = (blockIdx.x + 1 == gridDim.x ? s.W : min(s.W, ox0 + kSsimTile)) - ox0;
  float l1 = 0.f, sq = 0.f;
  for (int k = tid; k < rows * cols; k += kThreads) {
    const int r = k / cols + s.pad, q = k % cols + s.pad;  // span coordinates
    const float2 p = in[r][q];
    const float d = p.x - p.y;
    l1 += fabsf(d);
    sq += d * d;
  }
  __shared__ float scratch[3][kThreads / kWarpSize];
  const int64_t block = (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x +
                        blockIdx.x;
  const float mine[3] = {ssim_sum, l1, sq};
  const float sum = block_reduce<kThreads>(mine, scratch, tid,
                                           [](int, float a, float b) { return a + b; });
  if (tid < 3) partials[block * 3 + tid] = sum;
}

// Folds the blocks' partials (one warp per sum, float64) into loss, L1, SSIM and MSE.
__global__ void photometric_finish_kernel(const float* __restrict__ partials, int64_t blocks,
                                          double inv_outputs, double inv_inputs, float lambda,
                                          float* __restrict__ out) {
  __shared__ double total[3];
  const int t = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const double v = fold_blocks(partials, blocks, 3, t, lane, 0.0, SumOp{});
  if (lane == 0) total[t] = v;
  __syncthreads();
  if (threadIdx.x != 0) return;
  const double ssim = total[0] * inv_outputs, l1 = total[1] * inv_inputs;
  out[0] = static_cast<float>((1.0 - lambda) * l1 + lambda * (1.0 - ssim));
  out[1] = static_cast<float>(l1);
  out[2] = static_cast<float>(ssim);
  out[3] = static_cast<float>(total[2] * inv_inputs);
}

__device__ __forceinline__ float grad_or_zero(const float* g) { return g != nullptr ? *g : 0.f; }

// v_map [B, Ho, Wo, C] is the SSIM map's gradient; without it (nullptr) the gradients of the
// photometric loss's outputs in `lg` apply.
template <typename Y>
__global__ void __launch_bounds__(kThreads) ssim_backward_kernel(
    const float* __restrict__ x, const Y* __restrict__ y, const float* __restrict__ v_map,
    LossGrads lg, const float* __restrict__ d_mu, const float* __restrict__ d_xx,
    const float* __restrict__ d_xy, Shape s, Window win, float* __restrict__ v_x) {
  // d loss / d ssim_map (the same at every output) and the L1 and MSE weights.
  const float g_loss = v_map == nullptr ? grad_or_zero(lg.loss) : 0.f;
  const float g_map = (grad_or_zero(lg.ssim) - lg.lambda * g_loss) * lg.inv_outputs;
  const float w_l1 = ((1.f - lg.lambda) * g_loss + grad_or_zero(lg.l1)) * lg.inv_inputs;
  const float w_mse = 2.f * grad_or_zero(lg.mse) * lg.inv_inputs;
  __shared__ float in[3][kSpanY][kSpanX + 1];
  __shared__ float h[3][kSpanY][kSsimTile + 1];
  const int b = blockIdx.z / s.C, c = blockIdx.z % s.C;
  const int iy0 = blockIdx.y * kSsimRows, ix0 = blockIdx.x * kSsimTile;
  // Input row py is averaged by the outputs oy in [py + pad - 10, py + pad].
  const int oy_start = iy0 + s.pad - (kWin - 1), ox_start = ix0 + s.pad - (kWin - 1);
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpanY * kSpanX; i += kThreads) {
    const int r = i / kSpanX, q = i % kSpanX;
    const int oy = oy_start + r, ox = ox_start + q;
    float g0 = 0.f, g1 = 0.f, g2 = 0.f;
    if (oy >= 0 && oy < s.Ho && ox >= 0 && ox < s.Wo) {
      const int64_t at = at_pixel(b, oy, ox, c, s.Ho, s.Wo, s.C);
      const float g = v_map != nullptr ? v_map[at] : g_map;
      g0 = g * d_mu[at];
      g1 = g * d_xx[at];
      g2 = g * d_xy[at];
    }
    in[0][r][q] = g0;
    in[1][r][q] = g1;
    in[2][r][q] = g2;
  }
  __syncthreads();
  // The window is symmetric, so the adjoint blur is the same blur.
  blur_rows<3>(in, h, win);
  __syncthreads();
  float m[2][3];
  blur_columns<3>(h, win, m[0], m[1]);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int py = iy0 + 2 * threadIdx.y + r, px = ix0 + threadIdx.x;
    if (py >= s.H || px >= s.W) continue;
    const int64_t at = at_pixel(b, py, px, c, s.H, s.W, s.C);
    const float xv = x[at], yv = value_at(y, at);
    float v = m[r][0] + 2.f * xv * m[r][1] + yv * m[r][2];
    if (v_map == nullptr) {
      const float d = xv - yv;
      v += w_l1 * static_cast<float>((d > 0.f) - (d < 0.f)) + w_mse * d;
    }
    v_x[at] = v;
  }
}

Window gaussian_window(double sigma) {
  Window win;
  double w[kWin], sum = 0.0;
  for (int k = 0; k < kWin; ++k) {
    const double d = k - (kWin - 1) / 2.0;
    w[k] = std::exp(-d * d / (2.0 * sigma * sigma));
    sum += w[k];
  }
  for (int k = 0; k < kWin; ++k) win.w[k] = static_cast<float>(w[k] / sum);
  return win;
}

template <typename Y>
void ssim_forward_as(const float* x, const Y* y, const Shape& s, const dim3& grid, double sigma,
                     double c1, double c2, float* map, float* d_mu, float* d_xx, float* d_xy,
                     float* partials, cudaStream_t stream) {
  ssim_forward_kernel<Y><<<grid, dim3(kSsimTile, kSsimTile), 0, stream>>>(
      x, y, s, gaussian_window(sigma), static_cast<float>(c1), static_cast<float>(c2), map, d_mu,
      d_xx, d_xy, partials);
}

template <typename Y>
void ssim_backward_as(const float* x, const Y* y, const Shape& s, int64_t batch, double sigma,
                      const float* v_map, const LossGrads& lg, const float* d_mu,
                      const float* d_xx, const float* d_xy, float* v_x, cudaStream_t stream) {
  ssim_backward_kernel<Y><<<grid_over(s.W, s.H, batch, s), dim3(kSsimTile, kSsimTile), 0,
                            stream>>>(x, y, v_map, lg, d_mu, d_xx, d_xy, s,
                                      gaussian_window(sigma), v_x);
}

}  // namespace

void launch_ssim_forward(const float* x, const float* y, const Shape& s, const dim3& grid,
                         double sigma, double c1, double c2, float* map, float* d_mu,
                         float* d_xx, float* d_xy, float* partials, cudaStream_t stream) {
  ssim_forward_as(x, y, s, grid, sigma, c1, c2, map, d_mu, d_xx, d_xy, partials, stream);
}

void launch_ssim_forward(const float* x, const uint8_t* y, const Shape& s, const dim3& grid,
                         double sigma, double c1, double c2, float* map, float* d_mu,
                         float* d_xx, float* d_xy, float* partials, cudaStream_t stream) {
  ssim_forward_as(x, y, s, grid, sigma, c1, c2, map, d_mu, d_xx, d_xy, partials, stream);
}

void launch_photometric_finish(const float* partials, int64_t blocks, double inv_outputs,
                               double inv_inputs, double lambda, float* stats,
                               cudaStream_t stream) {
  photometric_finish_kernel<<<1, 96, 0, stream>>>(partials, blocks, inv_outputs, inv_inputs,
                                                  static_cast<float>(lambda), stats);
}

void launch_ssim_backward(const float* x, const float* y, const Shape& s, int64_t batch,
                          double sigma, const float* v_map, const LossGrads& lg,
                          const float* d_mu, const float* d_xx, const float* d_xy, float* v_x,
                          cudaStream_t stream) {
  ssim_backward_as(x, y, s, batch, sigma, v_map, lg, d_mu, d_xx, d_xy, v_x, stream);
}

void launch_ssim_backward(const float* x, const uint8_t* y, const Shape& s, int64_t batch,
                          double sigma, const float* v_map, const LossGrads& lg,
                          const float* d_mu, const float* d_xx, const float* d_xy, float* v_x,
                          cudaStream_t stream) {
  ssim_backward_as(x, y, s, batch, sigma, v_map, lg, d_mu, d_xx, d_xy, v_x, stream);
}

}  // namespace gsnb
