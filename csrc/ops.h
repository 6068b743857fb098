// Host entry points of the gsnb rasterizer; bound to Python in ext.cpp.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace gsnb {

// -> means2d [C,N,2], conics [C,N,3], depths [C,N], radii [C,N,2] int32, feats [C,N,3|4]
//    (rgb, and depth when with_depth), tiles [C,N] int32 (tiles each splat touches).
//    coeffs: RGB [N,3] (sh_degree -1) or SH [N,K,3].
std::vector<at::Tensor> project_forward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& opacities, const at::Tensor& coeffs, const at::Tensor& viewmats,
    const at::Tensor& Ks, int64_t width, int64_t height, double near_plane, double far_plane,
    int64_t sh_degree, bool with_depth);

// -> v_means [N,3], v_quats [N,4], v_scales [N,3], v_coeffs (shape of coeffs).
std::vector<at::Tensor> project_backward(
    const at::Tensor& means, const at::Tensor& quats, const at::Tensor& scales,
    const at::Tensor& coeffs, const at::Tensor& viewmats, const at::Tensor& Ks, int64_t width,
    int64_t height, double near_plane, double far_plane, int64_t sh_degree,
    const at::Tensor& radii, const at::Tensor& conics, const at::Tensor& v_means2d,
    const at::Tensor& v_conics, const at::Tensor& v_feats, const at::Tensor& v_depths);

// -> tile offsets [C, tiles_y, tiles_x] int32, splat ids [M] int32 (flat index c * N + n),
//    sorted by camera, tile and depth.
std::vector<at::Tensor> bin_splats(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height);

// -> rgb [C,H,W,3], expected depth [C,H,W,1] (empty without a depth channel), alpha [C,H,W,1],
//    last ids [C,H,W] int32. feats [C,N,3|4]: colours, and depth as a fourth channel.
std::vector<at::Tensor> rasterize_forward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height);

// -> v_means2d [C,N,2], v_conics [C,N,3], v_feats [C,N,3|4], v_opacities [N] (+ |v_means2d|
//    summed per pixel [C,N,2] when absgrad).
std::vector<at::Tensor> rasterize_backward(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& feats,
    const at::Tensor& opacities, const at::Tensor& offsets, const at::Tensor& flat_ids,
    int64_t width, int64_t height, const at::Tensor& alpha, const at::Tensor& depth,
    const at::Tensor& last_ids, const at::Tensor& v_rgb, const at::Tensor& v_depth,
    const at::Tensor& v_alpha, bool absgrad);

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

}  // namespace gsnb
