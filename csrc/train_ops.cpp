// Host side of the training entry points (ops.h): the checks of the tensors, the outputs,
// the device guard and the current stream, then the launchers of the kernel files
// (launch.h). One file for all of them: its compile time is that of its ATen headers.
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "host.h"
#include "launch.h"
#include "ops.h"

namespace gsnb {

// ---- fused SSIM and photometric loss (ssim.cu) ---------------------------------------------

namespace {

// t is a contiguous [B, H, W, C] of `dtype` on `device`; `who` names the caller in errors.
void check_image(const at::Tensor& t, const at::Device& device, const char* who,
                 const char* name, at::ScalarType dtype = at::kFloat) {
  check_input(t, device, who, name, dtype);
  TORCH_CHECK(t.dim() == 4, who, ": ", name, " must be [B, H, W, C], got ", t.sizes());
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

// The checked layout of an image pair; `who` names the caller in errors. With `bytes`, img2
// may be uint8 (a photo, read as v / 255) as well as float32.
Shape pair_shape(const at::Tensor& img1, const at::Tensor& img2, int64_t pad, const char* who,
                 bool bytes = false) {
  check_image(img1, img1.device(), who, "img1");
  const bool is_bytes = bytes && img2.defined() && img2.scalar_type() == at::kByte;
  TORCH_CHECK(!bytes || !img2.defined() || is_bytes || img2.scalar_type() == at::kFloat, who,
              ": img2 must be float32 or uint8, got ", dtype_name(img2.scalar_type()));
  check_image(img2, img1.device(), who, "img2", is_bytes ? at::kByte : at::kFloat);
  TORCH_CHECK(img1.sizes() == img2.sizes(), who, ": images differ in shape: ", img1.sizes(),
              " and ", img2.sizes());
  return make_shape(img1, pad);
}

// The saved maps (and the incoming map gradient) must have the SSIM map's shape.
void check_maps(std::initializer_list<const at::Tensor*> maps, const at::Tensor& img,
                const Shape& s, const char* who) {
  const int64_t batch = img.size(0);
  for (const at::Tensor* t : maps) {
    check_image(*t, img.device(), who, "a map");
    TORCH_CHECK(t->size(0) == batch && t->size(1) == s.Ho && t->size(2) == s.Wo &&
                    t->size(3) == s.C,
                who, ": a map has shape ", t->sizes());
  }
}

// f(img2's data): const uint8_t* for a photo's bytes (pair_shape's `bytes`), else const float*.
template <typename F>
void with_target(const at::Tensor& img2, F&& f) {
  if (img2.scalar_type() == at::kByte)
    f(img2.data_ptr<uint8_t>());
  else
    f(img2.data_ptr<float>());
}

// The SSIM map and/or the per-block partial sums, and the derivative maps for the backward.
void launch_forward(const at::Tensor& img1, const at::Tensor& img2, const Shape& s,
                    const dim3& grid, double sigma, double c1, double c2, float* map,
                    const std::array<at::Tensor, 3>& d, bool with_grad, float* partials) {
  float* d_mu = with_grad ? d[0].data_ptr<float>() : nullptr;
  float* d_xx = with_grad ? d[1].data_ptr<float>() : nullptr;
  float* d_xy = with_grad ? d[2].data_ptr<float>() : nullptr;
  const auto stream = c10::cuda::getCurrentCUDAStream();
  with_target(img2, [&](const auto* y) {
    launch_ssim_forward(img1.data_ptr<float>(), y, s, grid, sigma, c1, c2, map, d_mu, d_xx, d_xy,
                        partials, stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void launch_backward(const at::Tensor& img1, const at::Tensor& img2, const Shape& s,
                     double sigma, const float* v_map, const LossGrads& lg, const at::Tensor& d_mu,
                     const at::Tensor& d_xx, const at::Tensor& d_xy, at::Tensor& v_x) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  with_target(img2, [&](const auto* y) {
    launch_ssim_backward(img1.data_ptr<float>(), y, s, img1.size(0), sigma, v_map, lg,
                         d_mu.data_ptr<float>(), d_xx.data_ptr<float>(), d_xy.data_ptr<float>(),
                         v_x.data_ptr<float>(), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Derivative maps shaped like the SSIM map, when a backward pass will need them.
std::array<at::Tensor, 3> derivative_maps(const at::Tensor& img, const Shape& s, bool with_grad) {
  if (!with_grad) return {};
  auto opts = img.options();
  const int64_t B = img.size(0);
  return {at::empty({B, s.Ho, s.Wo, s.C}, opts), at::empty({B, s.Ho, s.Wo, s.C}, opts),
          at::empty({B, s.Ho, s.Wo, s.C}, opts)};
}

}  // namespace

std::vector<at::Tensor> ssim_forward(
    const at::Tensor& img1, const at::Tensor& img2, int64_t pad, double sigma, double c1,
    double c2, bool with_grad) {
  const Shape s = pair_shape(img1, img2, pad, "ssim");
  const at::cuda::CUDAGuard guard(img1.device());
  const int64_t B = img1.size(0);
  auto map = at::empty({B, s.Ho, s.Wo, s.C}, img1.options());
  const auto d = derivative_maps(img1, s, with_grad);
  if (map.numel() > 0)
    launch_forward(img1, img2, s, grid_over(s.Wo, s.Ho, B, s), sigma, c1, c2,
                   map.data_ptr<float>(), d, with_grad, nullptr);
  return {map, d[0], d[1], d[2]};
}

std::vector<at::Tensor> photometric_forward(
    const at::Tensor& img1, const at::Tensor& img2, int64_t pad, double sigma, double c1,
    double c2, double lambda, bool with_grad) {
  const Shape s = pair_shape(img1, img2, pad, "photometric loss", /*bytes=*/true);
  TORCH_CHECK(img1.numel() > 0, "photometric loss: empty images");
  const at::cuda::CUDAGuard guard(img1.device());
  const int64_t B = img1.size(0);
  const auto d = derivative_maps(img1, s, with_grad);
  const dim3 grid = grid_over(s.Wo, s.Ho, B, s);
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  auto partials = at::empty({blocks, 3}, img1.options());
  auto stats = at::empty({4}, img1.options());
  launch_forward(img1, img2, s, grid, sigma, c1, c2, nullptr, d, with_grad,
                 partials.data_ptr<float>());
  const double outputs = static_cast<double>(B) * s.Ho * s.Wo * s.C;
  launch_photometric_finish(partials.data_ptr<float>(), blocks, 1.0 / outputs,
                            1.0 / img1.numel(), lambda, stats.data_ptr<float>(),
                            c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {stats, d[0], d[1], d[2]};
}

at::Tensor ssim_backward(
    const at::Tensor& img1, const at::Tensor& img2, const at::Tensor& v_map,
    const at::Tensor& d_mu, const at::Tensor& d_xx, const at::Tensor& d_xy, int64_t pad,
    double sigma) {
  const Shape s = pair_shape(img1, img2, pad, "ssim_backward");
  const at::cuda::CUDAGuard guard(img1.device());
  check_maps({&v_map, &d_mu, &d_xx, &d_xy}, img1, s, "ssim_backward");
  auto v_x = at::empty_like(img1);
  if (v_x.numel() > 0)
    launch_backward(img1, img2, s, sigma, v_map.data_ptr<float>(), LossGrads{}, d_mu, d_xx,
                    d_xy, v_x);
  return v_x;
}

at::Tensor photometric_backward(
    const at::Tensor& img1, const at::Tensor& img2, const at::Tensor& d_mu,
    const at::Tensor& d_xx, const at::Tensor& d_xy, int64_t pad, double sigma, double lambda,
    const std::optional<at::Tensor>& g_loss, const std::optional<at::Tensor>& g_l1,
    const std::optional<at::Tensor>& g_ssim, const std::optional<at::Tensor>& g_mse) {
  const Shape s = pair_shape(img1, img2, pad, "photometric_backward", /*bytes=*/true);
  const at::cuda::CUDAGuard guard(img1.device());
  check_maps({&d_mu, &d_xx, &d_xy}, img1, s, "photometric_backward");
  auto scalar = [&](const std::optional<at::Tensor>& g) -> const float* {
    if (!g.has_value() || !g->defined()) return nullptr;
    check_input(*g, img1.device(), "photometric_backward", "an incoming gradient");
    TORCH_CHECK(g->numel() == 1,
                "photometric_backward: an incoming gradient must be a scalar, got ", g->sizes());
    return g->data_ptr<float>();
  };
  const double outputs = static_cast<double>(img1.size(0)) * s.Ho * s.Wo * s.C;
  const LossGrads lg{scalar(g_loss),
                     scalar(g_l1),
                     scalar(g_ssim),
                     scalar(g_mse),
                     static_cast<float>(lambda),
                     static_cast<float>(1.0 / outputs),
                     static_cast<float>(1.0 / img1.numel())};
  auto v_x = at::empty_like(img1);
  launch_backward(img1, img2, s, sigma, nullptr, lg, d_mu, d_xx, d_xy, v_x);
  return v_x;
}

// ---- health sums (health.cu) ---------------------------------------------------------------

namespace {

// Pointers and sizes of up to kMaxTensors contiguous float32 tensors on `device`.
TensorList make_list(const std::vector<at::Tensor>& tensors, const at::Device& device,
                     const char* what) {
  TORCH_CHECK(static_cast<int64_t>(tensors.size()) <= kMaxTensors, "health_sums: at most ",
              kMaxTensors, " ", what, " tensors");
  TensorList list{};
  list.count = static_cast<int>(tensors.size());
  for (int t = 0; t < list.count; ++t) {
    const at::Tensor& p = tensors[t];
    check_input(p, device, "health_sums", what, at::kFloat, t);
    list.ptr[t] = p.data_ptr<float>();
    list.numel[t] = p.numel();
  }
  return list;
}

}  // namespace

at::Tensor health_sums(const at::Tensor& scales, const at::Tensor& opacities,
                       const std::vector<at::Tensor>& params,
                       const std::vector<at::Tensor>& grads,
                       const std::vector<at::Tensor>& tail,
                       const std::optional<at::Tensor>& host) {
  check_input(scales, scales.device(), "health_sums", "scales");
  TORCH_CHECK(scales.dim() == 2 && scales.size(1) == 3, "health_sums: scales must be [N, 3], got ",
              scales.sizes());
  const int64_t n = scales.size(0);
  check_input(opacities, scales.device(), "health_sums", "opacities");
  TORCH_CHECK(opacities.numel() == n, "health_sums: opacities must be [N] with N = ", n, ", got ",
              opacities.sizes());
  const at::cuda::CUDAGuard guard(scales.device());
  const TensorList list = make_list(params, scales.device(), "parameter");
  const TensorList grad_list = make_list(grads, scales.device(), "gradient");
  TORCH_CHECK(n > 0, "health_sums: no Gaussians");
  TORCH_CHECK(static_cast<int64_t>(tail.size()) <= kMaxTail, "health_sums: at most ", kMaxTail,
              " tail tensors, got ", tail.size());
  HealthTail tail_list{};
  int64_t tail_values = 0;
  for (const at::Tensor& t : tail) {
    const bool is_long = t.defined() && t.scalar_type() == at::kLong;
    check_input(t, scales.device(), "health_sums", "tail", is_long ? at::kLong : at::kFloat,
                tail_list.count);
    TORCH_CHECK(t.numel() <= 64, "health_sums: a tail tensor holds at most 64 values, got ",
                t.numel());
    tail_list.ptr[tail_list.count] = t.data_ptr();
    tail_list.numel[tail_list.count] = t.numel();
    tail_list.is_long[tail_list.count] = is_long;
    ++tail_list.count;
    tail_values += t.numel();
  }
  int64_t most = n;
  for (const TensorList* l : {&list, &grad_list})
    for (int t = 0; t < l->count; ++t) most = std::max(most, l->numel[t] / 8);
  const int blocks = health_blocks(most);
  auto options = scales.options().dtype(at::kDouble);
  auto block_out = at::empty({blocks, kHealthSlots}, options);
  const int64_t values = kHealthSlots + tail_values;
  const bool to_host = host.has_value() && host->defined();
  if (to_host)
    TORCH_CHECK(host->device().is_cpu() && host->scalar_type() == at::kDouble &&
                    host->is_contiguous() && host->numel() == values,
                "health_sums: host must be a contiguous float64 CPU tensor of ", values,
                " values, got ", dtype_name(host->scalar_type()), " ", host->sizes(), " on ",
                host->device());
  auto out = at::empty({values}, options);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  launch_health(blocks, scales.data_ptr<float>(), opacities.data_ptr<float>(), n, list,
                grad_list, block_out.data_ptr<double>(), stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  launch_health_finish(block_out.data_ptr<double>(), blocks, tail_list, out.data_ptr<double>(),
                       stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (to_host)  // the step's read-back, without a copy_ through the dispatcher from Python
    C10_CUDA_CHECK(cudaMemcpyAsync(host->data_ptr(), out.data_ptr(), values * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream));
  return out;
}

// ---- Adam (adam.cu) ------------------------------------------------------------------------

namespace {

// The step gate's values (float64 [3] on `device`, see gate.cuh), or nullptr without one.
const double* gate_pointer(const std::optional<at::Tensor>& gate, const at::Device& device,
                           const char* who) {
  if (!gate.has_value() || !gate->defined()) return nullptr;
  check_input(*gate, device, who, "gate", at::kDouble);
  TORCH_CHECK(gate->numel() == 3, who, ": the gate must hold 3 values, got ", gate->numel());
  return gate->data_ptr<double>();
}

// t is a contiguous float32 tensor on `device` with `numel` values.
void check_entry(const at::Tensor& t, const at::Device& device, int64_t numel, const char* what,
                 int64_t i) {
  check_input(t, device, "adam_step", what, at::kFloat, i);
  TORCH_CHECK(t.numel() == numel, "adam_step: ", what, " ", i, " has ", t.numel(),
              " values, its parameter ", numel);
}

}  // namespace

void adam_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
               const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
               const std::vector<double>& step_sizes, const std::vector<double>& bias2_sqrts,
               double beta1, double beta2, double eps, const std::optional<at::Tensor>& gate,
               const std::vector<int64_t>& row_values,
               const std::vector<int64_t>& active_values) {
  const size_t count = params.size();
  TORCH_CHECK(count <= kMaxTensors, "adam_step: at most ", kMaxTensors, " tensors, got ", count);
  TORCH_CHECK(grads.size() == count && exp_avgs.size() == count && exp_avg_sqs.size() == count &&
                  step_sizes.size() == count && bias2_sqrts.size() == count,
              "adam_step: the lists differ in length");
  TORCH_CHECK(row_values.size() == active_values.size() &&
                  (row_values.empty() || row_values.size() == count),
              "adam_step: row_values and active_values need one entry per tensor, or none");
  if (count == 0) return;
  check_input(params[0], params[0].device(), "adam_step", "parameter", at::kFloat, 0);
  const at::cuda::CUDAGuard guard(params[0].device());
  AdamTensors list{};
  int64_t most = 0;
  const at::Device device = params[0].device();
  for (size_t i = 0; i < count; ++i) {
    const int64_t numel = params[i].numel(), at = static_cast<int64_t>(i);
    check_entry(params[i], device, numel, "parameter", at);
    check_entry(grads[i], device, numel, "gradient", at);
    check_entry(exp_avgs[i], device, numel, "exp_avg", at);
    check_entry(exp_avg_sqs[i], device, numel, "exp_avg_sq", at);
    int64_t row = std::max<int64_t>(numel, 1), active = row;
    if (!row_values.empty()) {
      row = row_values[i];
      active = active_values[i];
      TORCH_CHECK(row > 0 && numel % row == 0 && active >= 0 && active <= row,
                  "adam_step: tensor ", i, " of ", numel, " values cannot be rows of ", row,
                  " with ", active, " of each updated");
    }
    list.t[i] = AdamTensor{params[i].data_ptr<float>(),  grads[i].data_ptr<float>(),
                           exp_avgs[i].data_ptr<float>(), exp_avg_sqs[i].data_ptr<float>(),
                           numel,                         static_cast<float>(step_sizes[i]),
                           static_cast<float>(bias2_sqrts[i]), row, active};
    most = std::max(most, numel / row * active);
  }
  const double* gate_ptr = gate_pointer(gate, device, "adam_step");
  if (most == 0) return;
  launch_adam(list, static_cast<int64_t>(count), beta1, beta2, eps, gate_ptr,
              c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- densification sums (densify.cu) -------------------------------------------------------

void accumulate_grad2d(const at::Tensor& grads, const at::Tensor& radii, double sx, double sy,
                       at::Tensor& grad2d, at::Tensor& count,
                       const std::optional<at::Tensor>& gate) {
  const char* who = "accumulate_grad2d";
  check_input(grads, grads.device(), who, "grads");
  TORCH_CHECK(grads.dim() == 3 && grads.size(2) == 2,
              "accumulate_grad2d: grads must be [C, N, 2], got ", grads.sizes());
  check_input(radii, grads.device(), who, "radii", at::kInt);
  TORCH_CHECK(radii.sizes() == grads.sizes(),
              "accumulate_grad2d: radii must be [C, N, 2] like grads, got ", radii.sizes());
  const int64_t num_cams = grads.size(0), n = grads.size(1);
  for (const at::Tensor* t : {&grad2d, &count}) {
    check_input(*t, grads.device(), who, "a running sum");
    TORCH_CHECK(t->numel() == n, "accumulate_grad2d: the running sums must be [N] with N = ", n,
                ", got ", t->sizes());
  }
  const double* gate_ptr = gate_pointer(gate, grads.device(), who);
  if (n == 0 || num_cams == 0) return;
  const at::cuda::CUDAGuard guard(grads.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  launch_accumulate_grad2d(num_cams, n, grads.data_ptr<float>(), radii.data_ptr<int>(), sx, sy,
                           grad2d.data_ptr<float>(), count.data_ptr<float>(), gate_ptr, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- refine (refine.cu) ----------------------------------------------------------------------

void refine_rows(const at::Tensor& pos, int64_t kept, int64_t cloned, int64_t children,
                 const at::Tensor& quats, const at::Tensor& log_scales, const at::Tensor& noise,
                 double shrink, const std::vector<at::Tensor>& sources,
                 const std::vector<at::Tensor>& outputs, const std::vector<int64_t>& kinds,
                 const at::Tensor& rows) {
  const char* who = "refine_rows";
  const at::Device device = quats.device();
  check_input(quats, device, who, "quats");
  TORCH_CHECK(quats.dim() == 2 && quats.size(1) == 4, who, ": quats must be [N, 4], got ",
              quats.sizes());
  const int64_t n = quats.size(0);
  TORCH_CHECK(n > 0, who, ": no Gaussians");
  check_input(pos, device, who, "pos", at::kInt);
  TORCH_CHECK(pos.dim() == 2 && pos.size(0) == kRefinePlanRows && pos.size(1) == n, who,
              ": pos must be [", static_cast<int>(kRefinePlanRows), ", ", n, "], got ",
              pos.sizes());
  check_input(log_scales, device, who, "log_scales");
  TORCH_CHECK(log_scales.numel() == n * 3, who, ": log_scales must be [N, 3] with N = ", n);
  check_input(noise, device, who, "noise");
  TORCH_CHECK(noise.dim() == 3 && noise.size(0) == 2 && noise.size(2) == 3, who,
              ": noise must be [2, S, 3], got ", noise.sizes());
  TORCH_CHECK(kept >= 0 && cloned >= 0 && children >= 0, who, ": negative row counts");
  const int64_t m = kept + cloned + 2 * children;
  TORCH_CHECK(m <= std::numeric_limits<int>::max(), who, ": too many rows");
  const size_t count = sources.size();
  TORCH_CHECK(count <= static_cast<size_t>(kMaxRefineTensors), who, ": at most ",
              kMaxRefineTensors, " tensors, got ", count);
  TORCH_CHECK(outputs.size() == count && kinds.size() == count, who,
              ": sources, outputs and kinds differ in length");
  RefineTensors list{};
  list.count = static_cast<int>(count);
  int64_t most = 0;
  for (size_t t = 0; t < count; ++t) {
    const int64_t at = static_cast<int64_t>(t);
    check_input(sources[t], device, who, "source", at::kFloat, at);
    check_input(outputs[t], device, who, "output", at::kFloat, at);
    const int64_t width = sources[t].numel() / n;
    TORCH_CHECK(sources[t].numel() == n * width && width > 0, who, ": source ", at,
                " is not [N, ...] with N = ", n);
    TORCH_CHECK(outputs[t].numel() == m * width, who, ": output ", at, " must hold ", m,
                " rows of ", width, " values, got ", outputs[t].numel());
    const int64_t kind = kinds[t];
    TORCH_CHECK(kind >= kRefineCopy && kind <= kRefineRevisedLogit, who, ": unknown kind ", kind);
    TORCH_CHECK((kind != kRefineMeans && kind != kRefineLogScales) || width == 3, who,
                ": means and log-scales have 3 values a row");
    TORCH_CHECK(kind != kRefineRevisedLogit || width == 1, who, ": opacities have 1 value a row");
    list.src[t] = sources[t].data_ptr<float>();
    list.dst[t] = outputs[t].data_ptr<float>();
    list.width[t] = static_cast<int>(width);
    list.kind[t] = static_cast<int>(kind);
    most = std::max(most, n * width);
  }
  int64_t* rows_ptr = nullptr;
  if (rows.numel() > 0) {
    check_input(rows, device, who, "rows", at::kLong);
    TORCH_CHECK(rows.numel() == m, who, ": rows must be [", m, "], got ", rows.sizes());
    rows_ptr = rows.data_ptr<int64_t>();
  }
  if (count == 0) return;
  const at::cuda::CUDAGuard guard(device);
  launch_refine_rows(n, pos.data_ptr<int>(), static_cast<int>(kept), static_cast<int>(cloned),
                     static_cast<int>(children), noise.size(1), quats.data_ptr<float>(),
                     log_scales.data_ptr<float>(), noise.data_ptr<float>(),
                     static_cast<float>(shrink), list, most, rows_ptr,
                     c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace gsnb
