// The default strategy's refine step (gsnb/train/strategy/refine.py) in one launch: every
// parameter and Adam moment of the Gaussians after clone, split and prune, written from the
// Gaussians before. The host works out which Gaussians keep a row, which clones and which
// split children survive the prune (inclusive scans `pos` [kPlanRows, N], one row per
// flag); here Gaussian i's rows go to
//   rest    (kept in place):  pos[kRest][i] - 1
//   clone   (a copy):         kept + pos[kClone][i] - 1
//   child c (c = 0, 1):       kept + cloned + c * children + pos[kChild][i] - 1
// the order of [rest, clones, children, children] with the pruned rows left out. Children
// draw their means from noise [2, S, 3] at the split's rank (pos[kSplit][i] - 1), shrink
// their scales and may take the revised opacity; Adam moments of new rows are zero.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common.cuh"
#include "launch.h"

namespace gsnb {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int flag_at(const int* __restrict__ pos, int64_t n, int row,
                                       int64_t i, int* index) {
  const int at = pos[row * n + i];
  const int before = i == 0 ? 0 : pos[row * n + i - 1];
  *index = at - 1;
  return at - before;
}

// Entry e of child c's value of a Gaussian whose stored value there is v, for tensors whose
// children differ from their parent (the kinds of launch.h's RefineTensors).
__device__ __forceinline__ float child_value(int kind, int e, int c, int rank, int64_t n_split,
                                             float v, int64_t i,
                                             const float* __restrict__ quats,
                                             const float* __restrict__ log_scales,
                                             const float* __restrict__ noise, float shrink) {
  if (kind == kRefineLogScales) return logf(expf(v) / shrink);
  if (kind == kRefineRevisedLogit) {
    const float o = 1.f / (1.f + expf(-v));
    const float p = 1.f - sqrtf(1.f - o);
    return logf(p / (1.f - p));
  }
  // kRefineMeans: mean + R (scales * noise), R the rotation of the normalised quaternion.
  const float* q = quats + i * 4;
  const float norm = fmaxf(sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]), 1e-12f);
  const Mat3 r = quat_to_rotmat(q[0] / norm, q[1] / norm, q[2] / norm, q[3] / norm);
  const float* d = noise + (c * n_split + rank) * 3;
  float offset = 0.f;
#pragma unroll
  for (int k = 0; k < 3; ++k) offset += r.m[e][k] * expf(log_scales[i * 3 + k]) * d[k];
  return v + offset;
}

__global__ void refine_rows_kernel(int64_t n, const int* __restrict__ pos, int kept,
                                   int cloned, int children, int64_t n_split,
                                   const float* __restrict__ quats,
                                   const float* __restrict__ log_scales,
                                   const float* __restrict__ noise, float shrink,
                                   RefineTensors list, int64_t* __restrict__ rows) {
  const int t = blockIdx.y;
  const int w = list.width[t], kind = list.kind[t];
  const float* __restrict__ src = list.src[t];
  float* __restrict__ dst = list.dst[t];
  const int64_t total = n * w;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t i = idx / w;
    const int e = static_cast<int>(idx - i * w);
    const float v = src[idx];
    const bool zero_new = kind == kRefineMoment;
    const bool first = t == 0 && e == 0 && rows != nullptr;  // one thread per Gaussian
    // A plan inconsistent with kept, cloned, children or the noise writes nothing out of
    // bounds: rows past the outputs and ranks past the draws are skipped.
    int at;
    if (flag_at(pos, n, kRefineRest, i, &at) && at < kept) {
      dst[static_cast<int64_t>(at) * w + e] = v;
      if (first) rows[at] = i;
    }
    if (flag_at(pos, n, kRefineClone, i, &at) && at < cloned) {
      const int64_t row = static_cast<int64_t>(kept) + at;
      dst[row * w + e] = zero_new ? 0.f : v;
      if (first) rows[row] = i;
    }
    int rank;
    if (flag_at(pos, n, kRefineChild, i, &at) && at < children) {
      flag_at(pos, n, kRefineSplit, i, &rank);
      if (rank < 0 || rank >= n_split) continue;
      for (int c = 0; c < 2; ++c) {
        const int64_t row = static_cast<int64_t>(kept) + cloned +
                            static_cast<int64_t>(c) * children + at;
        float out = v;
        if (zero_new) {
          out = 0.f;
        } else if (kind != kRefineCopy) {
          out = child_value(kind, e, c, rank, n_split, v, i, quats, log_scales, noise, shrink);
        }
        dst[row * w + e] = out;
        if (first) rows[row] = i;
      }
    }
  }
}

}  // namespace

void launch_refine_rows(int64_t n, const int* pos, int kept, int cloned, int children,
                        int64_t n_split, const float* quats, const float* log_scales,
                        const float* noise, float shrink, const RefineTensors& list,
                        int64_t most, int64_t* rows, cudaStream_t stream) {
  const dim3 grid(blocks_for(most, kThreads, 2048), static_cast<unsigned>(list.count));
  refine_rows_kernel<<<grid, kThreads, 0, stream>>>(n, pos, kept, cloned, children, n_split,
                                                     quats, log_scales, noise, shrink, list,
                                                     rows);
}

}  // namespace gsnb
