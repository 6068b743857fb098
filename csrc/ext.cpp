// Python bindings of the gsnb rasterizer. pybind.h alone gives the casters of at::Tensor
// (and, with stl.h, of std::optional and std::vector of them): <torch/extension.h> would add
// the whole C++ frontend, several times the compile time of everything else here.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gsnb CUDA rasterizer and fused training kernels";
  m.attr("ABI_VERSION") = 15;
  // Every entry point runs without the GIL: each only launches work on a stream (binning
  // also waits for its count), so another Python thread -- training beside a viewer or a
  // notebook's widgets -- runs meanwhile instead of waiting for this one's GPU.
  const auto nogil = py::call_guard<py::gil_scoped_release>();
  m.def("project_forward", &gsnb::project_forward, "EWA projection + SH + tile counts",
        py::arg("means"), py::arg("quats"), py::arg("scales"), py::arg("opacities"),
        py::arg("coeffs"), py::arg("rest"), py::arg("viewmats"), py::arg("Ks"), py::arg("width"),
        py::arg("height"), py::arg("near_plane"), py::arg("far_plane"), py::arg("sh_degree"),
        py::arg("with_depth"), py::arg("stored"), py::arg("antialiased"), py::arg("backgrounds"),
        py::arg("check_values"), py::arg("filter3d") = py::none(), nogil);
  m.def("project_backward", &gsnb::project_backward, "backward of project_forward",
        py::arg("means"), py::arg("quats"), py::arg("scales"), py::arg("opacities"),
        py::arg("coeffs"), py::arg("rest"), py::arg("viewmats"), py::arg("Ks"), py::arg("width"),
        py::arg("height"), py::arg("near_plane"), py::arg("far_plane"), py::arg("sh_degree"),
        py::arg("radii"), py::arg("v_means2d"), py::arg("v_conics"),
        py::arg("v_feats"), py::arg("v_depths"), py::arg("v_opacities_cam"), py::arg("stored"),
        py::arg("antialiased"), py::arg("filter3d") = py::none(), nogil);
  m.def("bin_splats", &gsnb::bin_splats, "sort splat-tile intersections by tile and depth",
        py::arg("means2d"), py::arg("conics"), py::arg("opacities"), py::arg("depths"),
        py::arg("radii"), py::arg("tiles"), py::arg("width"), py::arg("height"), py::arg("stored"), nogil);
  m.def("bin_splats_within", &gsnb::bin_splats_within,
        "bin_splats into buffers of a given capacity, without waiting for the count",
        py::arg("means2d"), py::arg("conics"), py::arg("opacities"), py::arg("depths"),
        py::arg("radii"), py::arg("tiles"), py::arg("width"), py::arg("height"), py::arg("stored"),
        py::arg("capacity"), nogil);
  m.def("rasterize_forward", &gsnb::rasterize_forward, "front-to-back compositing per tile",
        py::arg("means2d"), py::arg("conics"), py::arg("feats"), py::arg("opacities"),
        py::arg("offsets"), py::arg("flat_ids"), py::arg("width"), py::arg("height"),
        py::arg("backgrounds"), py::arg("stored"), nogil);
  m.def("rasterize_backward", &gsnb::rasterize_backward, "backward of rasterize_forward",
        py::arg("means2d"), py::arg("conics"), py::arg("feats"), py::arg("opacities"),
        py::arg("offsets"), py::arg("flat_ids"), py::arg("width"), py::arg("height"),
        py::arg("alpha"), py::arg("depth"), py::arg("last_ids"), py::arg("seg_starts"),
        py::arg("states"), py::arg("v_rgb"), py::arg("v_depth"), py::arg("v_alpha"),
        py::arg("absgrad"), py::arg("backgrounds"), py::arg("stored"), nogil);
  m.def("set_rasterize_rows", &gsnb::set_rasterize_rows,
        "pixels a thread of the backward compositing shades: 0 by the grid's size, 1 or 2",
        py::arg("rows"));
  m.def("set_rasterize_patch", &gsnb::set_rasterize_patch,
        "the width of a backward compositing warp's pixel patch: 0 the default, 8 or 16",
        py::arg("width"));
  m.def("set_rasterize_segments", &gsnb::set_rasterize_segments,
        "segments of long splat lists for the backward compositing: 0 by the grid's size, "
        "-1 none, or a multiple of 256",
        py::arg("length"));
  m.def("set_rasterize_forward_segments", &gsnb::set_rasterize_forward_segments,
        "whether a forward pass with segments walks them at once: 0 by the grid's size, 1 "
        "always, -1 never",
        py::arg("mode"));
  m.def("ssim_forward", &gsnb::ssim_forward, "fused SSIM map and its derivatives", py::arg("img1"),
        py::arg("img2"), py::arg("pad"), py::arg("sigma"), py::arg("c1"), py::arg("c2"),
        py::arg("with_grad"), nogil);
  m.def("ssim_backward", &gsnb::ssim_backward, "backward of ssim_forward", py::arg("img1"),
        py::arg("img2"), py::arg("v_map"), py::arg("d_mu"), py::arg("d_xx"), py::arg("d_xy"),
        py::arg("pad"), py::arg("sigma"), nogil);
  m.def("photometric_forward", &gsnb::photometric_forward, "fused 3DGS photometric loss",
        py::arg("img1"), py::arg("img2"), py::arg("pad"), py::arg("sigma"), py::arg("c1"),
        py::arg("c2"), py::arg("lam"), py::arg("with_grad"), nogil);
  m.def("photometric_backward", &gsnb::photometric_backward, "backward of photometric_forward",
        py::arg("img1"), py::arg("img2"), py::arg("d_mu"), py::arg("d_xx"), py::arg("d_xy"),
        py::arg("pad"), py::arg("sigma"), py::arg("lam"), py::arg("g_loss"), py::arg("g_l1"),
        py::arg("g_ssim"), py::arg("g_mse"), nogil);
  m.def("health_sums", &gsnb::health_sums, "sums behind the training health signals",
        py::arg("scales"), py::arg("opacities"), py::arg("params"), py::arg("grads"),
        py::arg("tail"), py::arg("host") = py::none(), nogil);
  m.def("adam_step", &gsnb::adam_step, "Adam over several tensors in one launch",
        py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"),
        py::arg("step_sizes"), py::arg("bias2_sqrts"), py::arg("beta1"), py::arg("beta2"),
        py::arg("eps"), py::arg("gate"), py::arg("row_values") = std::vector<int64_t>{},
        py::arg("active_values") = std::vector<int64_t>{}, nogil);
  m.def("accumulate_grad2d", &gsnb::accumulate_grad2d, "densification's running sums",
        py::arg("grads"), py::arg("radii"), py::arg("sx"), py::arg("sy"), py::arg("grad2d"),
        py::arg("count"), py::arg("gate"), nogil);
  m.def("refine_rows", &gsnb::refine_rows, "a refine step's clone, split and prune in one launch",
        py::arg("pos"), py::arg("kept"), py::arg("cloned"), py::arg("children"), py::arg("quats"),
        py::arg("log_scales"), py::arg("noise"), py::arg("shrink"), py::arg("sources"),
        py::arg("outputs"), py::arg("kinds"), py::arg("rows"), nogil);
  m.def("train_forward_backward", &gsnb::train_forward_backward,
        "a training step's render, photometric loss and gradients in one call",
        py::arg("means"), py::arg("quats"), py::arg("scales"), py::arg("opacities"),
        py::arg("sh0"), py::arg("shN"), py::arg("viewmats"), py::arg("Ks"), py::arg("width"),
        py::arg("height"), py::arg("near_plane"), py::arg("far_plane"), py::arg("sh_degree"),
        py::arg("backgrounds"), py::arg("target"), py::arg("pad"), py::arg("sigma"), py::arg("c1"),
        py::arg("c2"), py::arg("lam"), py::arg("absgrad"), py::arg("antialiased") = false,
        py::arg("filter3d") = py::none(), py::arg("capacity") = 0,
        py::arg("error_shares") = false, nogil);
}
