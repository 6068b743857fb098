// Python bindings of the gsnb rasterizer.
#include <torch/extension.h>

#include "ops.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "gsnb CUDA rasterizer and fused training kernels";
  m.attr("ABI_VERSION") = 2;
  m.def("project_forward", &gsnb::project_forward, "EWA projection + SH + tile counts");
  m.def("project_backward", &gsnb::project_backward, "backward of project_forward");
  m.def("bin_splats", &gsnb::bin_splats, "sort splat-tile intersections by tile and depth");
  m.def("rasterize_forward", &gsnb::rasterize_forward, "front-to-back compositing per tile");
  m.def("rasterize_backward", &gsnb::rasterize_backward, "backward of rasterize_forward");
  m.def("ssim_forward", &gsnb::ssim_forward, "fused SSIM map and its derivatives");
  m.def("ssim_backward", &gsnb::ssim_backward, "backward of ssim_forward");
  m.def("photometric_forward", &gsnb::photometric_forward, "fused 3DGS photometric loss");
  m.def("photometric_backward", &gsnb::photometric_backward, "backward of photometric_forward");
  m.def("health_sums", &gsnb::health_sums, "sums behind the training health signals");
  m.def("adam_step", &gsnb::adam_step, "Adam over several tensors in one launch");
  m.def("accumulate_grad2d", &gsnb::accumulate_grad2d, "densification's running sums");
}
