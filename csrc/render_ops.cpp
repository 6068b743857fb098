// Host side of the rendering entry points (ops.h): the checks of the tensors, the outputs,
// the device guard and the current stream, then the launchers of the kernel files
// (launch.h). One file for the three stages: its compile time is that of its ATen headers.
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "host.h"
#include "launch.h"
#include "ops.h"

namespace gsnb {

// ---- projection (projection_forward.cu, projection_backward.cu) ----------------------------

namespace {

// The 3D filter's variances [N] (optional): their data, or null without them.
const float* filter_data(const std::optional<at::Tensor>& filter3d, const at::Tensor& means,
                         const char* who) {
  if (!filter3d.has_value() || !filter3d->defined()) return nullptr;
  check_input(*filter3d, means.device(), who, "filter3d");
  TORCH_CHECK(filter3d->dim() == 1 && filter3d->size(0) == means.size(0), who,
              ": filter3d must be [N] with N = ", means.size(0), ", got ", filter3d->sizes());
  return filter3d->data_ptr<float>();
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
    bool antialiased, const std::optional<at::Tensor>& backgrounds, bool check_values,
    const std::optional<at::Tensor>& filter3d) {
  const c10::cuda::OptionalCUDAGuard guard(means.device());
  const int64_t n = means.size(0), c = viewmats.size(0);
  const Coeffs cf = coeffs_view(coeffs, rest);
  const float* var3d = filter_data(filter3d, means, "project");
  const bool per_camera = antialiased || var3d != nullptr;
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
  auto opacities_cam = per_camera ? at::empty({c, n}, f) : at::empty({0}, f);
  // Zeroed by a fill on the stream; nothing on the host waits for it.
  auto problems = at::zeros({check_values ? 1 : 0}, f.dtype(at::kInt));
  // With checks, one thread per camera at least (the cameras are checked with no Gaussian).
  const int64_t threads = check_values ? std::max(c * n, c) : c * n;
  if (threads > 0) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    launch_project_forward(
        antialiased, threads, c, n, means.data_ptr<float>(), quats.data_ptr<float>(),
        scales.data_ptr<float>(), opacities.data_ptr<float>(), stored, cf, sh_degree,
        viewmats.data_ptr<float>(), Ks.data_ptr<float>(), width, height, near_plane, far_plane,
        means2d.data_ptr<float>(), conics.data_ptr<float>(), depths.data_ptr<float>(),
        radii.data_ptr<int>(), feats.data_ptr<float>(), channels, tiles.data_ptr<int>(),
        per_camera ? opacities_cam.data_ptr<float>() : nullptr, var3d,
        check_values && has_bg ? backgrounds->data_ptr<float>() : nullptr,
        check_values ? problems.data_ptr<int>() : nullptr, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {means2d, conics, depths, radii, feats, tiles, opacities_cam, problems};
}

std::vector<at::Tensor> project_backward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& coeffs, const std::optional<at::Tensor>& rest,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree, const at::Tensor& radii,
    const at::Tensor& v_means2d, const at::Tensor& v_conics, const at::Tensor& v_feats,
    const at::Tensor& v_depths, const at::Tensor& v_opacities_cam, bool stored,
    bool antialiased, const std::optional<at::Tensor>& filter3d) {
  const c10::cuda::OptionalCUDAGuard guard(means.device());
  const int64_t n = means.size(0), c = viewmats.size(0);
  const Coeffs cf = coeffs_view(coeffs, rest);
  const float* var3d = filter_data(filter3d, means, "project_backward");
  const bool per_camera = antialiased || var3d != nullptr;
  // One camera: the kernel writes every entry; several: atomics into zeroed buffers.
  auto alloc = [&](const at::Tensor& t) { return c > 1 ? at::zeros_like(t) : at::empty_like(t); };
  auto v_means = alloc(means);
  auto v_quats = alloc(quats);
  auto v_scales = alloc(scales);
  auto v_coeffs = alloc(coeffs);
  // An empty rest [N, 0, 3] gets its (empty) gradient too; no rest, an unused placeholder.
  auto v_rest = rest.has_value() && rest->defined() ? alloc(*rest) : at::empty({0}, means.options());
  if (per_camera)
    TORCH_CHECK(v_opacities_cam.numel() == c * n && opacities.numel() == n,
                "project_backward: the antialiased mode and the 3D filter need opacities [N] "
                "and v_opacities_cam [C, N], got ", opacities.sizes(), " and ",
                v_opacities_cam.sizes());
  auto v_opacities = per_camera ? alloc(opacities) : at::empty({0}, means.options());
  if (c * n > 0) {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    launch_project_backward(
        antialiased, c, n, means.data_ptr<float>(), quats.data_ptr<float>(),
        scales.data_ptr<float>(), per_camera ? opacities.data_ptr<float>() : nullptr,
        per_camera ? v_opacities_cam.data_ptr<float>() : nullptr,
        per_camera ? v_opacities.data_ptr<float>() : nullptr, var3d, stored, cf, sh_degree,
        viewmats.data_ptr<float>(), Ks.data_ptr<float>(), width, height, near_plane, far_plane,
        radii.data_ptr<int>(), v_means2d.data_ptr<float>(),
        v_conics.data_ptr<float>(), v_feats.data_ptr<float>(), v_feats.size(-1),
        v_depths.numel() > 0 ? v_depths.data_ptr<float>() : nullptr, v_means.data_ptr<float>(),
        v_quats.data_ptr<float>(), v_scales.data_ptr<float>(), v_coeffs.data_ptr<float>(),
        cf.rest_k > 0 ? v_rest.data_ptr<float>() : nullptr, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {v_means, v_quats, v_scales, v_coeffs, v_rest, v_opacities};
}

// ---- tile binning (binning.cu, sort.cu) ----------------------------------------------------
// One sort of 32-bit keys serves both steps. With several cameras the splats are sorted by
// depth alone: the (camera, tile) sort that follows is stable, so each camera's splats
// still reach their tiles front to back, in the same order a (camera, depth) sort gives.

namespace {

int bits_for(int64_t n) {
  int bits = 0;
  while ((int64_t(1) << bits) < n) ++bits;
  return bits;
}

// Stable radix sort of (key, value) int32 pairs on the low `bits` bits with cub's double
// buffers (small temporary storage); returns the buffers that hold the result.
std::pair<at::Tensor, at::Tensor> sort_pairs(
    at::Tensor keys, at::Tensor values, int bits, cudaStream_t stream) {
  const int64_t m = keys.numel();
  auto keys_alt = at::empty_like(keys);
  auto values_alt = at::empty_like(values);
  auto* k0 = reinterpret_cast<uint32_t*>(keys.data_ptr<int>());
  auto* k1 = reinterpret_cast<uint32_t*>(keys_alt.data_ptr<int>());
  int* v0 = values.data_ptr<int>();
  size_t temp_bytes = 0;
  radix_sort_pairs(nullptr, temp_bytes, k0, k1, v0, values_alt.data_ptr<int>(), m, bits, stream,
                   nullptr, nullptr);
  auto temp = at::empty({(int64_t)temp_bytes}, keys.options().dtype(at::kByte));
  uint32_t* sorted_keys = nullptr;
  int* sorted_values = nullptr;
  radix_sort_pairs(temp.data_ptr(), temp_bytes, k0, k1, v0, values_alt.data_ptr<int>(), m, bits,
                   stream, &sorted_keys, &sorted_values);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {sorted_keys == k0 ? keys : keys_alt, sorted_values == v0 ? values : values_alt};
}

}  // namespace

std::vector<at::Tensor> bin_splats_within(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height, bool stored, int64_t capacity) {
  const c10::cuda::OptionalCUDAGuard guard(means2d.device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t c = means2d.size(0), n = means2d.size(1), total = c * n;
  const int tiles_x = div_up(width, kTile), tiles_y = div_up(height, kTile);
  const int64_t num_tiles = (int64_t)tiles_x * tiles_y;
  TORCH_CHECK(c * num_tiles < (int64_t(1) << 31), "too many cameras x tiles: ", c * num_tiles);
  TORCH_CHECK(total < (int64_t(1) << 31), "too many cameras x Gaussians: ", total);
  TORCH_CHECK(opacities.numel() == n || opacities.numel() == total,
              "bin_splats: opacities must be [N] or [C, N] with C, N = ", c, ", ", n, ", got ",
              opacities.sizes());
  TORCH_CHECK(capacity >= 0 && capacity < (int64_t(1) << 31),
              "bin_splats: capacity must be in [0, 2^31), got ", capacity);

  auto iopt = means2d.options().dtype(at::kInt);
  auto lopt = means2d.options().dtype(at::kLong);
  auto offsets = at::empty({c, tiles_y, tiles_x}, iopt);
  if (total == 0) {
    offsets.fill_(int(capacity));
    return {offsets, at::zeros({capacity}, iopt), at::zeros({1}, lopt)};
  }

  // 1. Splats by depth (see the top of the file for several cameras).
  at::Tensor order;
  {
    auto ids = at::empty({total}, iopt);
    auto keys = at::empty({total}, iopt);
    launch_depth_keys(total, depths.data_ptr<float>(), tiles.data_ptr<int>(),
                      reinterpret_cast<uint32_t*>(keys.data_ptr<int>()), ids.data_ptr<int>(),
                      stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    order = sort_pairs(keys, ids, 32, stream).second;
  }

  // 2. Where each splat's intersections end, in that order; the last end is their count.
  auto counts = at::empty({total}, lopt);
  auto ends = at::empty({total}, lopt);
  launch_gather_counts(total, order.data_ptr<int>(), tiles.data_ptr<int>(),
                       counts.data_ptr<int64_t>(), stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  {
    size_t temp_bytes = 0;
    inclusive_sum(nullptr, temp_bytes, counts.data_ptr<int64_t>(), ends.data_ptr<int64_t>(),
                  total, stream);
    auto temp = at::empty({(int64_t)temp_bytes}, means2d.options().dtype(at::kByte));
    inclusive_sum(temp.data_ptr(), temp_bytes, counts.data_ptr<int64_t>(),
                  ends.data_ptr<int64_t>(), total, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  counts = at::Tensor();
  const at::Tensor count = ends.narrow(0, total - 1, 1);
  int64_t m = capacity;
  if (capacity == 0) {  // the step's one wait for the GPU: the intersection buffers' size
    C10_CUDA_CHECK(cudaMemcpyAsync(&m, count.data_ptr<int64_t>(), sizeof(int64_t),
                                   cudaMemcpyDeviceToHost, stream));
    C10_CUDA_CHECK(cudaStreamSynchronize(stream));
    TORCH_CHECK(m < (int64_t(1) << 31), "more than 2^31 splat-tile intersections: ", m);
    if (m == 0) {
      offsets.zero_();
      return {offsets, at::empty({0}, iopt), count};
    }
  }

  // 3. One (camera, tile) key per intersection, then a stable sort on those keys only. Keys
  // are slot + 1 (binning.cu); the entries the count leaves unused keep key 0.
  auto keys = at::empty({m}, iopt);
  auto values = at::empty({m}, iopt);
  if (capacity > 0)
    C10_CUDA_CHECK(cudaMemsetAsync(keys.data_ptr<int>(), 0, m * sizeof(int), stream));
  launch_emit(total, n, order.data_ptr<int>(), ends.data_ptr<int64_t>(),
              means2d.data_ptr<float>(), conics.data_ptr<float>(), opacities.data_ptr<float>(),
              opacities.numel() == total, stored, radii.data_ptr<int>(), width, height, tiles_x,
              num_tiles, m, reinterpret_cast<uint32_t*>(keys.data_ptr<int>()),
              values.data_ptr<int>(), stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  order = at::Tensor();
  auto sorted = sort_pairs(keys, values, bits_for(c * num_tiles + 1), stream);
  keys = at::Tensor();
  values = at::Tensor();

  launch_tile_offsets(m, reinterpret_cast<const uint32_t*>(sorted.first.data_ptr<int>()),
                      c * num_tiles, offsets.data_ptr<int>(), stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {offsets, sorted.second, count};
}

std::vector<at::Tensor> bin_splats(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height, bool stored) {
  auto bins = bin_splats_within(means2d, conics, opacities, depths, radii, tiles, width, height,
                                stored, 0);
  return {bins[0], bins[1]};
}

// ---- compositing (rasterize_forward.cu, rasterize_backward.cu) -----------------------------

namespace {

// Opacities are per Gaussian [N] (read at flat id % N) or per camera [C, N] (at flat id).
int64_t opacity_count(const at::Tensor& opacities, const at::Tensor& means2d) {
  const int64_t n = means2d.size(1), count = opacities.numel();
  TORCH_CHECK(count == n || count == means2d.size(0) * n,
              "rasterize: opacities must be [N] or [C, N] with C, N = ", means2d.size(0), ", ", n,
              ", got ", opacities.sizes());
  return count;
}

// The [C, 3] background colours, or nullptr for none (black).
const float* background_ptr(const std::optional<at::Tensor>& backgrounds, const at::Tensor& like) {
  if (!backgrounds.has_value() || !backgrounds->defined()) return nullptr;
  const at::Tensor& bg = *backgrounds;
  check_input(bg, like.device(), "rasterize", "backgrounds");
  TORCH_CHECK(bg.dim() == 2 && bg.size(0) == like.size(0) && bg.size(1) == 3,
              "rasterize: backgrounds must be [C, 3] with C = ", like.size(0), ", got ",
              bg.sizes());
  return bg.data_ptr<float>();
}

}  // namespace

std::vector<at::Tensor> rasterize_forward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const std::optional<at::Tensor>& backgrounds, bool stored) {
  const c10::cuda::OptionalCUDAGuard guard(means2d.device());
  const int64_t c = means2d.size(0), ch = feats.size(-1);
  TORCH_CHECK(ch == 3 || ch == 4, "rasterize_forward blends 3 or 4 channels, got ", ch);
  const float* bg = background_ptr(backgrounds, means2d);
  auto f = means2d.options();
  auto rgb = at::empty({c, height, width, 3}, f);
  auto depth = ch == 4 ? at::empty({c, height, width, 1}, f) : at::empty({0}, f);
  auto alpha = at::empty({c, height, width, 1}, f);
  // 16-bit walk ends relative to the tile (raster.cuh: pack_last), kept for the backward.
  auto last_ids = at::empty({c, height, width}, f.dtype(at::kShort));
  const int64_t n = opacity_count(opacities, means2d), m = flat_ids.size(0);
  // Segments of long splat lists (raster.cuh), for the backward: their first indices per
  // slot and the walk's state where each begins; empty without segments.
  const int seg_len = rasterize_segment_length(c, width, height, m);
  const int64_t slots = c * div_up(width, kTile) * div_up(height, kTile);
  auto seg_starts = at::empty({seg_len > 0 ? slots + 2 : 0}, f.dtype(at::kInt));
  const int64_t rows = seg_len > 0 ? slots + div_up(m, seg_len) : 0;
  auto states = at::empty({rows, ch + 1, kTile * kTile}, f);
  // Where the forward walks the segments at once, its per-segment scratch (launch.h).
  const bool by_segments = seg_len > 0 && rasterize_forward_by_segments(c, width, height);
  auto scratch = at::empty({by_segments ? rows : 0, 3, kTile * kTile}, f);
  launch_rasterize_forward(
      ch, c, n, width, height, m, means2d.data_ptr<float>(), conics.data_ptr<float>(),
      feats.data_ptr<float>(), opacities.data_ptr<float>(), stored, offsets.data_ptr<int>(),
      flat_ids.data_ptr<int>(), bg, rgb.data_ptr<float>(),
      ch == 4 ? depth.data_ptr<float>() : nullptr, alpha.data_ptr<float>(),
      reinterpret_cast<uint16_t*>(last_ids.data_ptr<int16_t>()), seg_len,
      seg_len > 0 ? seg_starts.data_ptr<int>() : nullptr,
      seg_len > 0 ? states.data_ptr<float>() : nullptr,
      by_segments ? scratch.data_ptr<float>() : nullptr, c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {rgb, depth, alpha, last_ids, seg_starts, states};
}

std::vector<at::Tensor> rasterize_backward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const at::Tensor& alpha, const at::Tensor& depth,
    const at::Tensor& last_ids, const at::Tensor& seg_starts, const at::Tensor& states,
    const at::Tensor& v_rgb, const at::Tensor& v_depth, const at::Tensor& v_alpha, bool absgrad,
    const std::optional<at::Tensor>& backgrounds, bool stored) {
  const c10::cuda::OptionalCUDAGuard guard(means2d.device());
  const float* bg = background_ptr(backgrounds, means2d);
  const bool segmented = seg_starts.numel() > 0;
  if (segmented) {
    const int64_t slots = means2d.size(0) * div_up(width, kTile) * div_up(height, kTile);
    TORCH_CHECK(seg_starts.scalar_type() == at::kInt && seg_starts.numel() == slots + 2 &&
                    states.dim() == 3 && states.size(1) == feats.size(-1) + 1 &&
                    states.size(2) == kTile * kTile,
                "rasterize_backward: seg_starts and states must be rasterize_forward's for "
                "these splats and this image size");
  }
  auto v_means2d = at::zeros_like(means2d);
  auto v_conics = at::zeros_like(conics);
  auto v_feats = at::zeros_like(feats);
  auto v_opacities = at::zeros_like(opacities);
  auto v_abs = absgrad ? at::zeros_like(means2d) : at::Tensor();
  float* v_abs_ptr = absgrad ? v_abs.data_ptr<float>() : nullptr;
  // Three channels blend rgb; any other count is taken as four (rgb and depth).
  const int64_t ch = feats.size(-1);
  const bool with_depth = ch != 3;
  const int64_t c = means2d.size(0), n = opacity_count(opacities, means2d);
  launch_rasterize_backward(
      ch, c, n, width, height, flat_ids.size(0), means2d.data_ptr<float>(),
      conics.data_ptr<float>(), feats.data_ptr<float>(), opacities.data_ptr<float>(), stored,
      offsets.data_ptr<int>(), flat_ids.data_ptr<int>(), alpha.data_ptr<float>(),
      with_depth ? depth.data_ptr<float>() : nullptr,
      reinterpret_cast<const uint16_t*>(last_ids.data_ptr<int16_t>()), bg,
      v_rgb.data_ptr<float>(),
      with_depth && v_depth.numel() > 0 ? v_depth.data_ptr<float>() : nullptr,
      v_alpha.numel() > 0 ? v_alpha.data_ptr<float>() : nullptr, v_means2d.data_ptr<float>(),
      v_conics.data_ptr<float>(), v_feats.data_ptr<float>(), v_opacities.data_ptr<float>(),
      v_abs_ptr, segmented ? seg_starts.data_ptr<int>() : nullptr,
      segmented ? states.data_ptr<float>() : nullptr, segmented ? states.size(0) : 0,
      c10::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (absgrad) return {v_means2d, v_conics, v_feats, v_opacities, v_abs};
  return {v_means2d, v_conics, v_feats, v_opacities};
}

int64_t set_rasterize_segments(int64_t length) {
  TORCH_CHECK(length == 0 || length == -1 || (length > 0 && length % (kTile * kTile) == 0 &&
                                              length <= (1 << 30)),
              "set_rasterize_segments: length must be 0 (by the grid's size), -1 (none) or a "
              "positive multiple of 256, got ", length);
  return rasterize_segments_override(static_cast<int>(length));
}

int64_t set_rasterize_forward_segments(int64_t mode) {
  TORCH_CHECK(mode >= -1 && mode <= 1,
              "set_rasterize_forward_segments: mode must be 0 (by the grid's size), 1 (always, "
              "with segments) or -1 (never), got ", mode);
  return rasterize_forward_segments_override(static_cast<int>(mode));
}

int64_t set_rasterize_rows(int64_t rows) {
  TORCH_CHECK(rows >= 0 && rows <= 2,
              "set_rasterize_rows: rows must be 0 (by the grid's size), 1 or 2, got ", rows);
  return rasterize_rows_override(static_cast<int>(rows));
}

int64_t set_rasterize_patch(int64_t width) {
  TORCH_CHECK(width == 0 || width == 8 || width == 16,
              "set_rasterize_patch: width must be 0 (the default), 8 or 16, got ", width);
  return rasterize_patch_override(static_cast<int>(width));
}

}  // namespace gsnb
