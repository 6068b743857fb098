// One training step's forward and backward pass in one call (ops.h, train_forward_backward):
// the stages render_splats, the photometric loss and autograd's backward pass run one after
// another here, with no Python between them. Each stage is the entry point of the same name,
// so the step computes what the autograd path computes.
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "host.h"
#include "launch.h"
#include "ops.h"

namespace gsnb {
namespace {

// d loss / d loss = 1: a float32 scalar on `like`'s device, made once per device and kept
// for the process (a fill and an allocation a step before). Never freed: a static tensor's
// destructor could run after the CUDA context is gone. The fill is waited for once, so
// that a step on another stream never reads it unfilled; where that first call comes
// inside a CUDA graph capture, which forbids the wait, the graph gets a tensor of its own.
at::Tensor unit_on(const at::Tensor& like) {
  constexpr int kDevices = 64;
  static std::mutex mutex;
  static at::Tensor* ones[kDevices] = {};
  const int device = like.get_device();
  TORCH_CHECK(device >= 0 && device < kDevices, "train_forward_backward: CUDA device ", device,
              " is beyond the ", kDevices, " this build counts");
  const std::lock_guard<std::mutex> lock(mutex);
  if (ones[device] == nullptr) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return at::ones({}, like.options());
    auto* one = new at::Tensor(at::ones({}, like.options()));
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
    ones[device] = one;
  }
  return *ones[device];
}

}  // namespace

std::vector<at::Tensor> train_forward_backward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& sh0, const std::optional<at::Tensor>& shN,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree,
    const std::optional<at::Tensor>& backgrounds, const at::Tensor& target, int64_t pad,
    double sigma, double c1, double c2, double lambda, bool absgrad, bool antialiased,
    const std::optional<at::Tensor>& filter3d, int64_t capacity, bool error_shares) {
  const char* who = "train_forward_backward";
  const auto device = means.device();
  // The photo as float32 in [0, 1] or as its bytes (read as v / 255, bytes_to_float's values).
  const bool bytes = target.defined() && target.scalar_type() == at::kByte;
  TORCH_CHECK(!target.defined() || bytes || target.scalar_type() == at::kFloat, who,
              ": target must be float32 or uint8, got ", dtype_name(target.scalar_type()));
  check_input(target, device, who, "target", bytes ? at::kByte : at::kFloat);
  TORCH_CHECK(viewmats.dim() == 3 && viewmats.size(0) == 1, who,
              ": one camera, viewmats [1, 4, 4], got ", viewmats.sizes());
  TORCH_CHECK(target.dim() == 4 && target.size(0) == 1 && target.size(1) == height &&
                  target.size(2) == width && target.size(3) == 3,
              who, ": target must be [1, ", height, ", ", width, ", 3], got ", target.sizes());
  const c10::cuda::OptionalCUDAGuard guard(device);

  // Forward: projection with SH colours, binning, compositing over the background. In the
  // antialiased mode or through the 3D filter the splats blend with the projection's
  // opacities [1, N] (activated, per camera); otherwise the rasterizer reads the logits.
  // With error_shares a fourth channel, zero for every splat, blends beside the colours: its
  // gradient gathers each splat's share of the error (below), and being zero it adds
  // nothing to the gradients of the splats' shapes, places and opacities.
  auto proj = project_forward(means, quats, scales, opacities, sh0, shN, viewmats, Ks, width,
                              height, near_plane, far_plane, sh_degree,
                              /*with_depth=*/error_shares, /*stored=*/true, antialiased,
                              std::nullopt, /*check_values=*/false, filter3d);
  const at::Tensor &means2d = proj[0], &conics = proj[1], &depths = proj[2], &radii = proj[3],
                   &feats = proj[4], &tiles = proj[5];
  if (error_shares) feats.select(2, 3).zero_();
  const bool per_camera = proj[6].numel() > 0;  // the projection's own rule (project_forward)
  const at::Tensor& blend = per_camera ? proj[6] : opacities;
  const bool logits = !per_camera;
  auto bins = bin_splats_within(means2d, conics, blend, depths, radii, tiles, width, height,
                               logits, capacity);
  const at::Tensor &offsets = bins[0], &flat_ids = bins[1], &count = bins[2];
  auto image = rasterize_forward(means2d, conics, feats, blend, offsets, flat_ids, width, height,
                                 backgrounds, logits);
  const at::Tensor &rgb = image[0], &depth = image[1], &alpha = image[2], &last_ids = image[3];
  const at::Tensor &seg_starts = image[4], &states = image[5];

  // The loss and its gradient with respect to the render (d loss / d loss = 1).
  auto loss = photometric_forward(rgb, target, pad, sigma, c1, c2, lambda, /*with_grad=*/true);
  const at::Tensor& stats = loss[0];
  if (capacity > 0)  // a render that lacks intersections closes the step's gate
    launch_flag_overflow(count.data_ptr<int64_t>(), capacity, stats.data_ptr<float>(),
                         c10::cuda::getCurrentCUDAStream());
  const at::Tensor one = unit_on(stats);
  auto v_rgb = photometric_backward(rgb, target, loss[1], loss[2], loss[3], pad, sigma, lambda,
                                    one, std::nullopt, std::nullopt, std::nullopt);

  // Backward: compositing, then projection. Classic without the filter, the opacity
  // logits' gradient is the rasterizer's (the projection reads no opacities); otherwise the
  // projection takes the per-camera opacities' gradient back to the logits and the shapes.
  const at::Tensor none = at::empty({0}, means.options());
  // Each splat's share of the error: sum over the pixels of its blending weight times the
  // pixel's mean absolute error e, the gradient of its fourth channel where that channel's
  // output (blend / max(alpha, kDepthAlphaMin)) has the gradient e max(alpha, 1e-10).
  at::Tensor v_fourth = none;
  if (error_shares) {
    const at::Tensor photo = bytes ? target.to(at::kFloat).div(255.0) : target;
    const at::Tensor error = rgb.sub(photo).abs().mean(-1, /*keepdim=*/true);
    v_fourth = error.mul(alpha.clamp_min(1e-10)).contiguous();
  }
  auto raster = rasterize_backward(means2d, conics, feats, blend, offsets, flat_ids, width,
                                   height, alpha, depth, last_ids, seg_starts, states, v_rgb,
                                   v_fourth, none, absgrad, backgrounds, logits);
  const at::Tensor &v_means2d = raster[0], &v_conics = raster[1], &v_feats = raster[2];
  at::Tensor shares = none;
  if (error_shares) {  // taken out before the projection reads the channel as a depth
    shares = v_feats.select(2, 3).reshape({-1}).clone();
    v_feats.select(2, 3).zero_();
  }
  auto grads = project_backward(means, quats, scales, per_camera ? opacities : none, sh0, shN,
                                viewmats, Ks, width, height, near_plane, far_plane, sh_degree,
                                radii, v_means2d, v_conics, v_feats, none,
                                per_camera ? raster[3] : none, /*stored=*/true, antialiased,
                                filter3d);
  const at::Tensor& v_opacities = per_camera ? grads[5] : raster[3];
  const at::Tensor sums = absgrad ? raster[4] : none;
  return {stats,    grads[0], grads[1],  grads[2], v_opacities, grads[3], grads[4],
          means2d,  v_means2d, radii,    sums,     count,       shares};
}

}  // namespace gsnb
