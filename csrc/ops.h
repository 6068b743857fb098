// Host entry points of the gsnb rasterizer; bound to Python in ext.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace gsnb {

// `stored` (here and below): scales are log-scales and opacities logits, as 3DGS trains them;
// the kernels apply exp and the sigmoid and return gradients of the stored values.

// -> means2d [C,N,2], conics [C,N,3], depths [C,N], radii [C,N,2] int32, feats [C,N,3|4]
//    (rgb, and depth when with_depth), tiles [C,N] int32 (tiles each splat touches),
//    opacities_cam [C,N] (antialiased: each splat's activated opacity times its
//    compensation sqrt(det(S) / det(S + 0.3 I)); empty otherwise).
//    coeffs: RGB [N,3] (sh_degree -1) or SH [N,K,3]; with rest [N,KR,3] (optional) the SH
//    coefficients are coeffs' K followed by rest's KR (3DGS's sh0 and shN).
//    check_values: also -> problems [1] int32, a bit per kind of bad value found (NaN/Inf in
//    an input, opacities outside [0, 1], negative scales, focal lengths <= 0; the bits are
//    projection_forward.cu's Problem), set on the device with no host sync; empty without.
//    backgrounds [C,3] (optional) are only checked here (the rasterizer composites them).
//    filter3d [N] (optional): Mip-Splatting's 3D filter variances; the scales become
//    sqrt(scales^2 + filter3d) and opacities_cam [C,N] holds each splat's opacity times
//    sqrt(prod(scales^2 / (scales^2 + filter3d))) (and the compensation when antialiased);
//    a variance that is not positive leaves its Gaussian unfiltered.
std::vector<at::Tensor> project_forward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& coeffs, const std::optional<at::Tensor>& rest,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree, bool with_depth, bool stored,
    bool antialiased, const std::optional<at::Tensor>& backgrounds, bool check_values,
    const std::optional<at::Tensor>& filter3d);

// -> v_means [N,3], v_quats [N,4], v_scales [N,3], v_coeffs (shape of coeffs), v_rest (shape
//    of rest; empty without), v_opacities [N] (antialiased or filter3d, from v_opacities_cam
//    [C,N]; empty otherwise, where opacities and v_opacities_cam are not read). Each visible
//    splat's conic is recomputed from the inputs: the forward's conics need not be kept.
std::vector<at::Tensor> project_backward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& coeffs, const std::optional<at::Tensor>& rest,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree, const at::Tensor& radii,
    const at::Tensor& v_means2d, const at::Tensor& v_conics, const at::Tensor& v_feats,
    const at::Tensor& v_depths, const at::Tensor& v_opacities_cam, bool stored,
    bool antialiased, const std::optional<at::Tensor>& filter3d);

// -> tile offsets [C, tiles_y, tiles_x] int32, splat ids [M] int32 (flat index c * N + n),
//    sorted by camera, tile and depth. Here and in rasterize_*, opacities are [N], or [C,N]
//    per camera (antialiased mode).
std::vector<at::Tensor> bin_splats(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height, bool stored);

// bin_splats with a count of intersections the caller chose (capacity > 0) instead of the
// one the GPU finds, so that the host need not wait for it: buffers of `capacity` entries,
// whose unused ones sort first and belong to no tile (each tile's list, and the last one's
// end, index the whole buffer). -> offsets, splat ids [capacity], then count [1] int64 on
// the device: the intersections there were; above capacity, the lists lack some of them.
// capacity 0 waits for the count and sizes the buffers by it, as bin_splats.
std::vector<at::Tensor> bin_splats_within(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height, bool stored, int64_t capacity);

// -> rgb [C,H,W,3], expected depth [C,H,W,1] (empty without a depth channel), alpha [C,H,W,1],
//    last ids [C,H,W] int16 (each pixel's walk end past its tile's first intersection, as
//    uint16 bits; 0xFFFF: the backward walks the tile again), then seg_starts [slots+2] int32
//    and states [S,ch+1,256] of the segments the backward walks (raster.cuh; both empty
//    on large grids). feats [C,N,3|4]: colours, and depth as a fourth channel.
//    backgrounds [C,3] (optional): rgb = blend + (1 - alpha) * background.
std::vector<at::Tensor> rasterize_forward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const std::optional<at::Tensor>& backgrounds, bool stored);

// -> v_means2d [C,N,2], v_conics [C,N,3], v_feats [C,N,3|4], v_opacities [N] or [C,N] (+ |v_means2d|
//    summed per pixel [C,N,2] when absgrad).
std::vector<at::Tensor> rasterize_backward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const at::Tensor& alpha, const at::Tensor& depth,
    const at::Tensor& last_ids, const at::Tensor& seg_starts, const at::Tensor& states,
    const at::Tensor& v_rgb, const at::Tensor& v_depth, const at::Tensor& v_alpha, bool absgrad,
    const std::optional<at::Tensor>& backgrounds, bool stored);

// Pixels a thread of the backward compositing shades: 0 (the default) chooses by the grid's
// size, 1 or 2 force it (benchmarks, tests); the gradients agree either way (to the order of
// float additions). Returns the previous setting.
int64_t set_rasterize_rows(int64_t rows);

// The width of a backward compositing warp's pixel patch: 0 (the default, 8), 8 or 16 force
// it (benchmarks, tests); the gradients agree either way. Returns the previous setting.
int64_t set_rasterize_patch(int64_t width);

// Segments of long splat lists for the backward compositing (raster.cuh): 0 (the default)
// on the small grids that shade one row a thread, -1 none, or a forced length (a positive
// multiple of 256). Returns the previous setting.
int64_t set_rasterize_segments(int64_t length);

// Whether a forward pass with segments walks them at once, one block each (three passes):
// 0 (the default) where one-pixel blocks would not fill the GPU once, 1 whenever there are
// segments, -1 never (one block a tile, recording the segments' states on its way). The
// outputs agree either way, to the order of float operations. Returns the previous setting.
int64_t set_rasterize_forward_segments(int64_t mode);

// Fused SSIM with an 11-tap Gaussian window over [B, H, W, C] float32 images.
// -> map [B, Ho, Wo, C] (Ho = H + 2 pad - 10), and with_grad its derivatives with respect
//    to the blurred mu_x, E[x^2] and E[xy] (else undefined tensors).
std::vector<at::Tensor> ssim_forward(
    const at::Tensor& img1, const at::Tensor& img2, int64_t pad, double sigma, double c1,
    double c2, bool with_grad);

// -> v_img1 [B, H, W, C]: the gradient of img1 given v_map, the gradient of the map.
at::Tensor ssim_backward(
    const at::Tensor& img1, const at::Tensor& img2, const at::Tensor& v_map,
    const at::Tensor& d_mu, const at::Tensor& d_xx, const at::Tensor& d_xy, int64_t pad,
    double sigma);

// The 3DGS photometric loss from the fused SSIM kernels, no SSIM map written. img2 (the
// photo) is float32 or uint8, read as v / 255 (bytes_to_float's values on a GPU).
// -> stats [4] (loss = (1 - lambda) L1 + lambda (1 - SSIM), L1, SSIM, MSE) and, with_grad,
//    the SSIM derivative maps photometric_backward takes.
std::vector<at::Tensor> photometric_forward(
    const at::Tensor& img1, const at::Tensor& img2, int64_t pad, double sigma, double c1,
    double c2, double lambda, bool with_grad);

// -> v_img1 [B, H, W, C] given the incoming gradients of loss, L1, SSIM and MSE (float32
//    scalars on the device; a missing one counts as zero).
at::Tensor photometric_backward(
    const at::Tensor& img1, const at::Tensor& img2, const at::Tensor& d_mu,
    const at::Tensor& d_xx, const at::Tensor& d_xy, int64_t pad, double sigma, double lambda,
    const std::optional<at::Tensor>& g_loss, const std::optional<at::Tensor>& g_l1,
    const std::optional<at::Tensor>& g_ssim, const std::optional<at::Tensor>& g_mse);

// Sums behind the training health signals (float64 [9]): count of NaN/Inf values in `params`,
// max and (shifted) sum and sum of squares of each Gaussian's largest log-scale, sum and max
// of log(largest / smallest scale), sum of sigmoid(opacity logit), then the sum of squares of
// the finite values in `grads` and their count of NaN/Inf. scales [N,3] are log-scales.
// The values of `tail` (up to 4 small float32 or int64 tensors, such as a step's loss terms
// and its count of intersections) follow as float64: one tensor for one read-back. `host`
// (a contiguous float64 CPU tensor of the result's length, pinned for the copy to be
// asynchronous) also receives the result, copied on the current stream after it is made.
at::Tensor health_sums(const at::Tensor& scales, const at::Tensor& opacities,
                       const std::vector<at::Tensor>& params,
                       const std::vector<at::Tensor>& grads,
                       const std::vector<at::Tensor>& tail,
                       const std::optional<at::Tensor>& host);

// Adam (no weight decay, no amsgrad) over up to 8 float32 tensors in one launch, in place;
// step_sizes = lr / (1 - beta1^t) and bias2_sqrts = sqrt(1 - beta2^t) per tensor. gate
// (optional, float64 [3] on the device: the gradients' sum of squares, their count of
// non-finite values, the loss): nothing is updated unless the sum fits a float32, the count
// is 0 and the loss is finite, decided on the device. row_values and active_values (one each
// per tensor, or both empty): tensor i is rows of row_values[i] values of which only the
// first active_values[i] are updated (the SH bands in use; the rest keep zero moments).
void adam_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
               const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
               const std::vector<double>& step_sizes, const std::vector<double>& bias2_sqrts,
               double beta1, double beta2, double eps, const std::optional<at::Tensor>& gate,
               const std::vector<int64_t>& row_values, const std::vector<int64_t>& active_values);

// Default densification's running sums, in place: for visible (radii > 0) splats,
// grad2d[n] += |(grads.x * sx, grads.y * sy)| and count[n] += 1 over the C cameras.
// grads [C,N,2] float32, radii [C,N,2] int32, grad2d and count [N] float32. gate (optional,
// as adam_step's): nothing is added unless it opens, decided on the device.
void accumulate_grad2d(const at::Tensor& grads, const at::Tensor& radii, double sx, double sy,
                       at::Tensor& grad2d, at::Tensor& count,
                       const std::optional<at::Tensor>& gate);

// One training step's forward and backward pass for one camera: render_splats' render of
// stored parameters (log-scales, opacity logits, sh0 [N,1,3] and shN [N,K-1,3]), classic or
// antialiased, through the 3D filter's variances filter3d [N] (optional, project_forward's),
// without depth, over backgrounds [1,3] (optional), then the photometric loss against
// target [1,H,W,3] float32 or uint8 (photometric_forward's pad, sigma, c1, c2 and lambda),
// then the gradients of the loss by the backward entry points above: what autograd computes
// from the same calls.
// -> stats [4] (loss, L1, SSIM, MSE), v_means [N,3], v_quats [N,4], v_scales [N,3],
//    v_opacities [N], v_sh0 [N,1,3], v_shN (shape of shN), means2d [1,N,2], v_means2d [1,N,2],
//    radii [1,N,2] int32, with absgrad |v_means2d| summed per pixel [1,N,2] (else empty),
//    the count [1] int64 of splat-tile intersections, and with error_shares each splat's
//    share of the error [N] (the sum over the pixels of its blending weight times the mean
//    over the channels of |rgb - target|; else empty). capacity > 0 bins the intersections
//    in buffers of that size without waiting for the GPU (bin_splats_within); where the
//    count exceeds it the render lacks some and the loss, stats[0], is NaN.
std::vector<at::Tensor> train_forward_backward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& sh0, const std::optional<at::Tensor>& shN,
    const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width, int64_t height,
    double near_plane, double far_plane, int64_t sh_degree,
    const std::optional<at::Tensor>& backgrounds, const at::Tensor& target, int64_t pad,
    double sigma, double c1, double c2, double lambda, bool absgrad,
    bool antialiased, const std::optional<at::Tensor>& filter3d, int64_t capacity,
    bool error_shares);

// The Gaussians after a refine step's clone, split and prune (refine.cu): outputs[t] [M, ...]
// from sources[t] [N, ...] by kinds[t] (launch.h's RefineKind), M = kept + cloned + 2
// children; pos [4, N] int32 holds the inclusive scans of the plan's flags (RefinePlanRow),
// noise [2, S, 3] the split children's draws, quats [N, 4] and log_scales [N, 3] the
// parents'. rows [M] int64 (or empty) receives the Gaussian each row comes from.
void refine_rows(const at::Tensor& pos, int64_t kept, int64_t cloned, int64_t children,
                 const at::Tensor& quats, const at::Tensor& log_scales, const at::Tensor& noise,
                 double shrink, const std::vector<at::Tensor>& sources,
                 const std::vector<at::Tensor>& outputs, const std::vector<int64_t>& kinds,
                 const at::Tensor& rows);

}  // namespace gsnb
