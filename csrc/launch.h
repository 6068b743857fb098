// Launchers of the CUDA kernels: raw pointers, sizes and a stream, no torch. The kernel
// files (.cu) define them; the host entry points (.cpp) check the tensors, allocate the
// outputs and call them. A launcher only launches: the caller checks cudaGetLastError
// (C10_CUDA_KERNEL_LAUNCH_CHECK) right after, as after a launch of its own. Kept free of
// ATen so that the kernel files compile in a few seconds.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

// A device function under nvcc; for the host compiler of the .cpp files, which never call
// it, a plain inline one, so that both see the same struct.
#ifdef __CUDACC__
#define GSNB_DEVICE __device__ __forceinline__
#else
#define GSNB_DEVICE inline
#endif

namespace gsnb {

// The side of a square screen tile in pixels; one rasterize block per tile.
constexpr int kTile = 16;

// ceil(n / d) for n >= 0 and d > 0: the tiles over an image side, the blocks over n items.
constexpr int64_t div_up(int64_t n, int64_t d) { return (n + d - 1) / d; }

// Blocks of `threads` threads, one thread per item, covering n items; at most `cap` blocks,
// for kernels that stride over the items past the grid.
inline int blocks_for(int64_t n, int threads,
                      int64_t cap = std::numeric_limits<int>::max()) {
  return static_cast<int>(std::min(div_up(n, threads), cap));
}

// The most tensors the Adam and health kernels take in one launch.
constexpr int kMaxTensors = 8;

// ---- projection_forward.cu, projection_backward.cu ----------------------------------------

// Each Gaussian's SH coefficients (or RGB): one [N, K, 3] tensor (rest_k 0), or the first
// head_k bases and the other rest_k in two tensors, as 3DGS stores them (sh0 and shN).
struct Coeffs {
  const float* head;
  int head_k;
  const float* rest;
  int rest_k;
  // Entry e (basis e / 3, channel e % 3) of Gaussian g's coefficients (read on the device).
  GSNB_DEVICE float at(int64_t g, int e) const {
    const int h = head_k * 3;
    return e < h ? head[g * h + e] : rest[g * (rest_k * 3) + (e - h)];
  }
};

// One thread per (camera, Gaussian), `threads` of them (at least one per camera with checks).
// var3d [N] (or null): the 3D filter's variances; with it or antialiased, opacities_cam
// [C, N] receives the opacities the splats blend with.
void launch_project_forward(
    bool antialiased, int64_t threads, int64_t c, int64_t n, const float* means,
    const float* quats, const float* scales, const float* opacities, bool stored,
    const Coeffs& cf, int64_t sh_degree, const float* viewmats, const float* Ks, int64_t width,
    int64_t height, double near_plane, double far_plane, float* means2d, float* conics,
    float* depths, int* radii, float* feats, int channels, int* tiles, float* opacities_cam,
    const float* var3d, const float* backgrounds, int* problems, cudaStream_t stream);

void launch_project_backward(
    bool antialiased, int64_t c, int64_t n, const float* means, const float* quats,
    const float* scales, const float* opacities, const float* v_opacities_cam,
    float* v_opacities, const float* var3d, bool stored, const Coeffs& cf, int64_t sh_degree,
    const float* viewmats, const float* Ks, int64_t width, int64_t height, double near_plane,
    double far_plane, const int* radii, const float* v_means2d,
    const float* v_conics, const float* v_feats, int64_t channels, const float* v_depths,
    float* v_means, float* v_quats, float* v_scales, float* v_head, float* v_rest,
    cudaStream_t stream);

// ---- binning.cu ---------------------------------------------------------------------------

// keys[i] = the depth bits of splat i (culled splats last), ids[i] = i.
void launch_depth_keys(int64_t total, const float* depths, const int* tiles, uint32_t* keys,
                       int* ids, cudaStream_t stream);

// counts[p] = tiles[order[p]].
void launch_gather_counts(int64_t total, const int* order, const int* tiles, int64_t* counts,
                          cudaStream_t stream);

// One key (the (camera, tile) slot + 1) and splat id per intersection, in the order of
// `order`; those at or past `capacity` are not written.
void launch_emit(int64_t total, int64_t n, const int* order, const int64_t* ends,
                 const float* means2d, const float* conics, const float* opacities,
                 bool per_camera, bool stored, const int* radii, int64_t width, int64_t height,
                 int tiles_x, int64_t num_tiles, int64_t capacity, uint32_t* keys, int* values,
                 cudaStream_t stream);

// offsets[t] = index of the first of the m sorted keys whose slot (key - 1) is >= t, for
// t < num_slots; keys 0 (unused entries) sort first and belong to no slot.
void launch_tile_offsets(int64_t m, const uint32_t* keys, int64_t num_slots, int* offsets,
                         cudaStream_t stream);

// loss[0] = NaN where *count (on the device) exceeds capacity.
void launch_flag_overflow(const int64_t* count, int64_t capacity, float* loss,
                          cudaStream_t stream);

// ---- sort.cu (cub) ------------------------------------------------------------------------

// Stable radix sort of m (key, value) pairs on the low `bits` bits of the keys, with cub's
// double buffers: keys and values hold the input, keys_alt and values_alt are scratch of
// the same size. With temp nullptr only sets temp_bytes; else sorts with temp_bytes of temp
// and sets *keys_out and *values_out to the buffers that hold the result.
void radix_sort_pairs(void* temp, size_t& temp_bytes, uint32_t* keys, uint32_t* keys_alt,
                      int* values, int* values_alt, int64_t m, int bits, cudaStream_t stream,
                      uint32_t** keys_out, int** values_out);

// out[i] = in[0] + ... + in[i] for i < total; with temp nullptr only sets temp_bytes.
void inclusive_sum(void* temp, size_t& temp_bytes, const int64_t* in, int64_t* out,
                   int64_t total, cudaStream_t stream);

// ---- rasterize_forward.cu, rasterize_backward.cu ------------------------------------------

// channels 3 blends rgb, any other count rgb and depth (4). depth is nullptr with 3.
// last_ids [C, H, W]: each pixel's walk end relative to its tile's first intersection
// (raster.cuh: pack_last). seg_len > 0 (rasterize_segment_length) also fills seg_starts
// [slots + 2] and the states of the segments (raster.cuh), [at most slots + ceil(m / seg_len),
// channels + 1, 256] floats; with 0 both are ignored. With segments, a scratch of as many
// [3, 256] floats makes the forward itself walk the segments at once
// (rasterize_forward_by_segments); nullptr walks each tile in one block.
void launch_rasterize_forward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* background, float* rgb,
    float* depth, float* alpha, uint16_t* last_ids, int seg_len, int* seg_starts,
    float* states, float* scratch, cudaStream_t stream);

// The segments' length for a forward pass of c cameras and m intersections: 0 (none) unless
// the backward compositing runs one row a thread (a small grid), else a multiple of 256.
int rasterize_segment_length(int64_t c, int64_t width, int64_t height, int64_t m);
// 0, the default, chooses by rasterize_segment_length's rule; -1 turns segments off; a
// positive multiple of 256 forces that length. Returns the previous setting.
int rasterize_segments_override(int length);
// Whether a forward pass with segments walks them at once (a scratch for it): by default
// where one-pixel blocks would not fill the GPU once.
bool rasterize_forward_by_segments(int64_t c, int64_t width, int64_t height);
// 0, the default, chooses by rasterize_forward_by_segments' rule; 1 walks the segments at
// once whenever there are segments; -1 never. Returns the previous setting.
int rasterize_forward_segments_override(int mode);

// seg_starts and states: the forward's (nullptr without segments; num_segments, the states'
// rows, sizes the grid).
void launch_rasterize_backward(
    int64_t channels, int64_t c, int64_t n, int64_t width, int64_t height, int64_t m,
    const float* means2d, const float* conics, const float* feats, const float* opacities,
    bool stored, const int* offsets, const int* flat_ids, const float* alpha,
    const float* depth, const uint16_t* last_ids, const float* background, const float* v_rgb,
    const float* v_depth, const float* v_alpha, float* v_means2d, float* v_conics,
    float* v_feats, float* v_opacities, float* v_abs, const int* seg_starts,
    const float* states, int64_t num_segments, cudaStream_t stream);

// Pixels a thread of the backward compositing shades (raster.cuh: rasterize_rows): 0, the
// default, chooses by the grid's size; 1 or 2 force it. Returns the previous setting.
int rasterize_rows_override(int rows);
int rasterize_rows_setting();

// The width of the pixel patch a warp of the backward compositing covers
// (rasterize_backward.cu): kPatchWidth unless forced. rasterize_patch_override: 0 restores
// the default, 8 or 16 force it; returns the previous setting.
constexpr int kPatchWidth = 8;
int rasterize_patch_override(int width);
int rasterize_patch_width();

// ---- ssim.cu ------------------------------------------------------------------------------

constexpr int kWin = 11;  // the Gaussian window's side
// A block of kSsimTile x kSsimTile threads covers kSsimTile columns and 2 kSsimTile rows of
// outputs (forward) or pixels (backward): each thread takes two vertically adjacent ones.
constexpr int kSsimTile = 16;
constexpr int kSsimRows = 2 * kSsimTile;

struct Shape {
  int H, W, C, Ho, Wo, pad;
};

// The incoming gradients of (loss, L1, SSIM, MSE), each nullptr when that output got none.
struct LossGrads {
  const float* loss;
  const float* l1;
  const float* ssim;
  const float* mse;
  float lambda, inv_outputs, inv_inputs;
};

// Blocks over the outputs (forward) or input pixels (backward), a z-slice per image channel.
inline dim3 grid_over(int width, int height, int64_t batch, const Shape& s) {
  return dim3(div_up(width, kSsimTile), div_up(height, kSsimRows),
              static_cast<unsigned>(batch * s.C));
}

// The SSIM map and/or the per-block partial sums [blocks, 3], and the derivative maps
// (d_mu, d_xx and d_xy nullptr without a backward). y may be 8-bit (the photo; v / 255).
void launch_ssim_forward(const float* x, const float* y, const Shape& s, const dim3& grid,
                         double sigma, double c1, double c2, float* map, float* d_mu,
                         float* d_xx, float* d_xy, float* partials, cudaStream_t stream);
void launch_ssim_forward(const float* x, const uint8_t* y, const Shape& s, const dim3& grid,
                         double sigma, double c1, double c2, float* map, float* d_mu,
                         float* d_xx, float* d_xy, float* partials, cudaStream_t stream);

// stats [4] = loss, L1, SSIM and MSE from the partials of launch_ssim_forward.
void launch_photometric_finish(const float* partials, int64_t blocks, double inv_outputs,
                               double inv_inputs, double lambda, float* stats,
                               cudaStream_t stream);

// v_x [batch, H, W, C] from the SSIM map's gradient v_map, or without it (nullptr) from the
// photometric loss's incoming gradients lg.
void launch_ssim_backward(const float* x, const float* y, const Shape& s, int64_t batch,
                          double sigma, const float* v_map, const LossGrads& lg,
                          const float* d_mu, const float* d_xx, const float* d_xy, float* v_x,
                          cudaStream_t stream);
void launch_ssim_backward(const float* x, const uint8_t* y, const Shape& s, int64_t batch,
                          double sigma, const float* v_map, const LossGrads& lg,
                          const float* d_mu, const float* d_xx, const float* d_xy, float* v_x,
                          cudaStream_t stream);

// ---- health.cu ----------------------------------------------------------------------------

constexpr int kHealthSlots = 9;  // the sums health_sums returns

struct TensorList {
  const float* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  int count;
};

// The blocks of the health pass over `most` items per thread slot.
int health_blocks(int64_t most);

// block_out [blocks, kHealthSlots]: each block's partial sums.
void launch_health(int blocks, const float* scales, const float* opacities, int64_t n,
                   const TensorList& params, const TensorList& grads, double* block_out,
                   cudaStream_t stream);

// Up to kMaxTail small tensors (float32 or int64) that health_sums appends to its sums.
constexpr int kMaxTail = 4;
struct HealthTail {
  const void* ptr[kMaxTail];
  int64_t numel[kMaxTail];
  bool is_long[kMaxTail];
  int count;
};

// out [kHealthSlots + the tail's values]: the blocks' partials folded in a fixed order, then
// the tail's values as float64.
void launch_health_finish(const double* block_out, int blocks, const HealthTail& tail,
                          double* out, cudaStream_t stream);

// ---- adam.cu ------------------------------------------------------------------------------

struct AdamTensor {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  int64_t numel;
  float step_size;
  float bias2_sqrt;
  // The tensor as rows of row_values values, of which only the first active_values are
  // updated (the SH bands in use); active_values == row_values updates every value.
  int64_t row_values;
  int64_t active_values;
};

struct AdamTensors {
  AdamTensor t[kMaxTensors];
  int first_block[kMaxTensors + 1];  // each tensor's first block (set by launch_adam)
  int count;
};

// The first count tensors of the list, one thread per float4 (or value); gate [3] (or
// nullptr): no update unless gate[0] <= the largest float32, gate[1] == 0 and gate[2] is
// finite.
void launch_adam(const AdamTensors& list, int64_t count, double beta1, double beta2,
                 double eps, const double* gate, cudaStream_t stream);

// ---- densify.cu ---------------------------------------------------------------------------

// grads [C, N, 2], radii [C, N, 2], grad2d and count [N]; gate [3] (or nullptr): nothing
// added unless it opens (gate.cuh).
void launch_accumulate_grad2d(int64_t num_cams, int64_t n, const float* grads, const int* radii,
                              double sx, double sy, float* grad2d, float* count,
                              const double* gate, cudaStream_t stream);

// ---- refine.cu ----------------------------------------------------------------------------

// The rows of refine.cu's plan `pos` [kRefinePlanRows, N]: inclusive scans of whether each
// Gaussian keeps its row, keeps a clone, keeps its split children, and is split.
enum RefinePlanRow { kRefineRest, kRefineClone, kRefineChild, kRefineSplit, kRefinePlanRows };

// How a tensor's new rows (clones and children) get their values: copied from the parent,
// zero (Adam moments), or drawn as a child's mean, log-scale or revised opacity logit.
enum RefineKind { kRefineCopy, kRefineMoment, kRefineMeans, kRefineLogScales, kRefineRevisedLogit };

// The most tensors one refine launch rewrites: six parameters and their two moments each.
constexpr int kMaxRefineTensors = 24;

struct RefineTensors {
  const float* src[kMaxRefineTensors];  // [N, width]
  float* dst[kMaxRefineTensors];        // [kept + cloned + 2 children, width]
  int width[kMaxRefineTensors];
  int kind[kMaxRefineTensors];          // RefineKind
  int count;
};

// Writes every tensor of `list` (`most`: the largest N * width) and, where rows is not
// nullptr, rows[r] = the Gaussian row r comes from. noise [2, n_split, 3]; quats [N, 4] and
// log_scales [N, 3] are the parents' (read for kRefineMeans).
void launch_refine_rows(int64_t n, const int* pos, int kept, int cloned, int children,
                        int64_t n_split, const float* quats, const float* log_scales,
                        const float* noise, float shrink, const RefineTensors& list,
                        int64_t most, int64_t* rows, cudaStream_t stream);

}  // namespace gsnb
