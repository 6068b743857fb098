// Fused SSIM (Wang et al. 2004) with an 11x11 Gaussian window, for the training loss.
// Images are [B, H, W, C] float32. The forward pass blurs the five local moments
// (mu_x, mu_y, E[x^2], E[y^2], E[xy]) separably in shared memory and writes the SSIM map
// with its derivatives with respect to mu_x, E[x^2] and E[xy]; the backward pass blurs
// those derivatives (times the incoming gradient) back onto the pixels of x.
// Output pixel (oy, ox) averages input rows oy - pad .. oy - pad + 10 (zero outside).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cmath>

#include "ops.h"

namespace gsnb {
namespace {

constexpr int kWin = 11;
constexpr int kSsimTile = 16;
constexpr int kSpan = kSsimTile + kWin - 1;  // a tile and its window's reach
constexpr int kThreads = kSsimTile * kSsimTile;

struct Window {
  float w[kWin];
};

struct Shape {
  int H, W, C, Ho, Wo, pad;
};

__device__ __forceinline__ int64_t at_pixel(int b, int y, int x, int c, int h, int w, int ch) {
  return ((static_cast<int64_t>(b) * h + y) * w + x) * ch + c;
}

// Horizontal pass: out[t][r][j] = sum_k w[k] in[t][r][j + k] for every row of the span.
template <int T>
__device__ __forceinline__ void blur_rows(
    const float (*in)[kSpan][kSpan + 1], float (*out)[kSpan][kSsimTile + 1], const Window& win) {
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpan * kSsimTile; i += kThreads) {
    const int r = i / kSsimTile, j = i % kSsimTile;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; ++t) acc[t] = 0.f;
#pragma unroll
    for (int k = 0; k < kWin; ++k) {
#pragma unroll
      for (int t = 0; t < T; ++t) acc[t] += win.w[k] * in[t][r][j + k];
    }
#pragma unroll
    for (int t = 0; t < T; ++t) out[t][r][j] = acc[t];
  }
}

__global__ void ssim_forward_kernel(
    const float* __restrict__ x, const float* __restrict__ y, Shape s, Window win, float c1,
    float c2, float* __restrict__ map, float* __restrict__ d_mu, float* __restrict__ d_xx,
    float* __restrict__ d_xy) {
  // in: x, y, x^2, y^2, xy over the span; h: the same blurred along rows.
  __shared__ float in[5][kSpan][kSpan + 1];
  __shared__ float h[5][kSpan][kSsimTile + 1];
  const int b = blockIdx.z / s.C, c = blockIdx.z % s.C;
  const int oy0 = blockIdx.y * kSsimTile, ox0 = blockIdx.x * kSsimTile;
  const int y0 = oy0 - s.pad, x0 = ox0 - s.pad;
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpan * kSpan; i += kThreads) {
    const int r = i / kSpan, q = i % kSpan;
    const int py = y0 + r, px = x0 + q;
    float u = 0.f, v = 0.f;
    if (py >= 0 && py < s.H && px >= 0 && px < s.W) {
      const int64_t at = at_pixel(b, py, px, c, s.H, s.W, s.C);
      u = x[at];
      v = y[at];
    }
    in[0][r][q] = u;
    in[1][r][q] = v;
    in[2][r][q] = u * u;
    in[3][r][q] = v * v;
    in[4][r][q] = u * v;
  }
  __syncthreads();
  blur_rows<5>(in, h, win);
  __syncthreads();
  const int i = threadIdx.y, j = threadIdx.x;
  const int oy = oy0 + i, ox = ox0 + j;
  if (oy >= s.Ho || ox >= s.Wo) return;
  float m[5] = {0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < kWin; ++k) {
#pragma unroll
    for (int t = 0; t < 5; ++t) m[t] += win.w[k] * h[t][i + k][j];
  }
  const float mu1 = m[0], mu2 = m[1];
  const float s11 = m[2] - mu1 * mu1, s22 = m[3] - mu2 * mu2, s12 = m[4] - mu1 * mu2;
  const float a1 = 2.f * mu1 * mu2 + c1, a2 = 2.f * s12 + c2;
  const float b1 = mu1 * mu1 + mu2 * mu2 + c1, b2 = s11 + s22 + c2;
  const float inv = 1.f / (b1 * b2);
  const float ssim = a1 * a2 * inv;
  const int64_t at = at_pixel(b, oy, ox, c, s.Ho, s.Wo, s.C);
  map[at] = ssim;
  if (d_mu == nullptr) return;
  // Partial derivatives holding the variances fixed, then through s11 = E[x^2] - mu1^2 and
  // s12 = E[xy] - mu1 mu2 to the blurred moments themselves.
  const float ds11 = -ssim / b2;
  const float ds12 = 2.f * a1 * inv;
  const float dmu1 = 2.f * mu2 * a2 * inv - ssim * 2.f * mu1 / b1;
  d_mu[at] = dmu1 - 2.f * mu1 * ds11 - mu2 * ds12;
  d_xx[at] = ds11;
  d_xy[at] = ds12;
}

__global__ void ssim_backward_kernel(
    const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ v_map,
    const float* __restrict__ d_mu, const float* __restrict__ d_xx,
    const float* __restrict__ d_xy, Shape s, Window win, float* __restrict__ v_x) {
  __shared__ float in[3][kSpan][kSpan + 1];
  __shared__ float h[3][kSpan][kSsimTile + 1];
  const int b = blockIdx.z / s.C, c = blockIdx.z % s.C;
  const int iy0 = blockIdx.y * kSsimTile, ix0 = blockIdx.x * kSsimTile;
  // Input row py is averaged by the outputs oy in [py + pad - 10, py + pad].
  const int oy_start = iy0 + s.pad - (kWin - 1), ox_start = ix0 + s.pad - (kWin - 1);
  const int tid = threadIdx.y * kSsimTile + threadIdx.x;
  for (int i = tid; i < kSpan * kSpan; i += kThreads) {
    const int r = i / kSpan, q = i % kSpan;
    const int oy = oy_start + r, ox = ox_start + q;
    float g0 = 0.f, g1 = 0.f, g2 = 0.f;
    if (oy >= 0 && oy < s.Ho && ox >= 0 && ox < s.Wo) {
      const int64_t at = at_pixel(b, oy, ox, c, s.Ho, s.Wo, s.C);
      const float g = v_map[at];
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
  const int i = threadIdx.y, j = threadIdx.x;
  const int py = iy0 + i, px = ix0 + j;
  if (py >= s.H || px >= s.W) return;
  float m[3] = {0.f, 0.f, 0.f};
#pragma unroll
  for (int k = 0; k < kWin; ++k) {
#pragma unroll
    for (int t = 0; t < 3; ++t) m[t] += win.w[k] * h[t][i + k][j];
  }
  const int64_t at = at_pixel(b, py, px, c, s.H, s.W, s.C);
  v_x[at] = m[0] + 2.f * x[at] * m[1] + y[at] * m[2];
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

void check_image(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), "ssim: ", name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == at::kFloat, "ssim: ", name, " must be float32");
  TORCH_CHECK(t.dim() == 4, "ssim: ", name, " must be [B, H, W, C], got ", t.sizes());
  TORCH_CHECK(t.is_contiguous(), "ssim: ", name, " must be contiguous");
}

Shape make_shape(const at::Tensor& img, int64_t pad) {
  Shape s;
  s.H = static_cast<int>(img.size(1));
  s.W = static_cast<int>(img.size(2));
  s.C = static_cast<int>(img.size(3));
  s.pad = static_cast<int>(pad);
  s.Ho = s.H + 2 * s.pad - (kWin - 1);
  s.Wo = s.W + 2 * s.pad - (kWin - 1);
  TORCH_CHECK(pad >= 0 && pad <= kWin / 2, "ssim: pad must be in [0, ", kWin / 2, "]");
  TORCH_CHECK(s.Ho > 0 && s.Wo > 0, "ssim: a ", s.H, "x", s.W, " image is smaller than the ",
              kWin, "x", kWin, " window without padding");
  return s;
}

}  // namespace

std::vector<at::Tensor> ssim_forward(
    const at::Tensor& img1, const at::Tensor& img2, int64_t pad, double sigma, double c1,
    double c2, bool with_grad) {
  check_image(img1, "img1");
  check_image(img2, "img2");
  TORCH_CHECK(img1.sizes() == img2.sizes(), "ssim: images differ in shape: ", img1.sizes(),
              " and ", img2.sizes());
  const at::cuda::CUDAGuard guard(img1.device());
  const Shape s = make_shape(img1, pad);
  const int64_t B = img1.size(0);
  auto map = at::empty({B, s.Ho, s.Wo, s.C}, img1.options());
  at::Tensor d_mu, d_xx, d_xy;
  if (with_grad) {
    d_mu = at::empty_like(map);
    d_xx = at::empty_like(map);
    d_xy = at::empty_like(map);
  }
  if (map.numel() > 0) {
    const dim3 block(kSsimTile, kSsimTile);
    const dim3 grid((s.Wo + kSsimTile - 1) / kSsimTile, (s.Ho + kSsimTile - 1) / kSsimTile,
                    static_cast<unsigned>(B * s.C));
    ssim_forward_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        img1.data_ptr<float>(), img2.data_ptr<float>(), s, gaussian_window(sigma),
        static_cast<float>(c1), static_cast<float>(c2), map.data_ptr<float>(),
        with_grad ? d_mu.data_ptr<float>() : nullptr, with_grad ? d_xx.data_ptr<float>() : nullptr,
        with_grad ? d_xy.data_ptr<float>() : nullptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {map, d_mu, d_xx, d_xy};
}

at::Tensor ssim_backward(
    const at::Tensor& img1, const at::Tensor& img2, const at::Tensor& v_map,
    const at::Tensor& d_mu, const at::Tensor& d_xx, const at::Tensor& d_xy, int64_t pad,
    double sigma) {
  check_image(img1, "img1");
  check_image(img2, "img2");
  const at::cuda::CUDAGuard guard(img1.device());
  const Shape s = make_shape(img1, pad);
  for (const at::Tensor* t : {&v_map, &d_mu, &d_xx, &d_xy}) {
    check_image(*t, "a map");
    TORCH_CHECK(t->size(0) == img1.size(0) && t->size(1) == s.Ho && t->size(2) == s.Wo &&
                    t->size(3) == s.C,
                "ssim_backward: a map has shape ", t->sizes());
  }
  auto v_x = at::empty_like(img1);
  if (v_x.numel() > 0) {
    const dim3 block(kSsimTile, kSsimTile);
    const dim3 grid((s.W + kSsimTile - 1) / kSsimTile, (s.H + kSsimTile - 1) / kSsimTile,
                    static_cast<unsigned>(img1.size(0) * s.C));
    ssim_backward_kernel<<<grid, block, 0, c10::cuda::getCurrentCUDAStream()>>>(
        img1.data_ptr<float>(), img2.data_ptr<float>(), v_map.data_ptr<float>(),
        d_mu.data_ptr<float>(), d_xx.data_ptr<float>(), d_xy.data_ptr<float>(), s,
        gaussian_window(sigma), v_x.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return v_x;
}

}  // namespace gsnb
