// Tile binning. Splats are first sorted by (camera, depth); each then emits one
// intersection per tile it touches, in that order, keyed by (camera, tile) only, and a
// stable radix sort on those short keys leaves every tile's splats contiguous and front
// to back. Sorting N depths plus M short keys moves far less data than sorting M
// 64-bit (camera, tile, depth) keys.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "common.cuh"
#include "host.h"
#include "ops.h"

namespace gsnb {
namespace {

constexpr int kThreads = 256;

template <typename Key>
__global__ void depth_keys_kernel(
    int64_t total, int n, const float* __restrict__ depths, const int* __restrict__ tiles,
    Key* __restrict__ keys, int* __restrict__ ids) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  // Culled splats (no tiles) sort last; visible depths are positive, so their bits order.
  const uint32_t bits = tiles[idx] > 0 ? __float_as_uint(depths[idx]) : 0xffffffffu;
  keys[idx] = sizeof(Key) == 8 ? (Key)(((uint64_t)(idx / n) << 32) | bits) : (Key)bits;
  ids[idx] = (int)idx;
}

__global__ void gather_counts_kernel(
    int64_t total, const int* __restrict__ order, const int* __restrict__ tiles,
    int64_t* __restrict__ counts) {
  const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (p < total) counts[p] = tiles[order[p]];
}

__global__ void emit_kernel(
    int64_t total, int n, const int* __restrict__ order, const int64_t* __restrict__ ends,
    const float* __restrict__ means2d, const float* __restrict__ conics,
    const float* __restrict__ opacities, bool per_camera, bool stored,
    const int* __restrict__ radii, int width, int height,
    int tiles_x, int num_tiles, uint32_t* __restrict__ keys, int* __restrict__ values) {
  const int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= total) return;
  int pos = p == 0 ? 0 : (int)ends[p - 1];
  const int end = (int)ends[p];
  if (pos == end) return;
  const int idx = order[p];
  const int cid = idx / n;
  const int gid = idx - cid * n;
  float r2;
  if (!extent2(opacity_of(opacities[per_camera ? idx : gid], stored), &r2)) return;
  const uint32_t cam_base = (uint32_t)cid * (uint32_t)num_tiles;
  for_each_tile(
      means2d[idx * 2], means2d[idx * 2 + 1], conics[idx * 3], conics[idx * 3 + 1],
      conics[idx * 3 + 2], r2, radii[idx * 2 + 1], width, height, [&](int tx, int ty) {
        if (pos < end) {
          keys[pos] = cam_base + (uint32_t)(ty * tiles_x + tx);
          values[pos] = idx;
        }
        ++pos;
      });
}

// offsets[t] = index of the first intersection whose (camera, tile) slot is >= t.
__global__ void tile_offsets_kernel(
    int64_t m, const uint32_t* __restrict__ keys, int64_t num_slots, int* __restrict__ offsets) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int64_t cur = keys[i];
  const int64_t prev = i == 0 ? -1 : (int64_t)keys[i - 1];
  for (int64_t t = prev + 1; t <= cur; ++t) offsets[t] = (int)i;
  if (i == m - 1)
    for (int64_t t = cur + 1; t < num_slots; ++t) offsets[t] = (int)m;
}

int bits_for(int64_t n) {
  int bits = 0;
  while ((int64_t(1) << bits) < n) ++bits;
  return bits;
}

// Stable radix sort of (key, value) pairs on the low `bits` bits with cub's double
// buffers (small temporary storage); returns the buffers that hold the result.
template <typename Key>
std::pair<at::Tensor, at::Tensor> sort_pairs(
    at::Tensor keys, at::Tensor values, int bits, cudaStream_t stream) {
  const int64_t m = keys.numel();
  auto keys_alt = at::empty_like(keys);
  auto values_alt = at::empty_like(values);
  auto* k0 = reinterpret_cast<Key*>(keys.data_ptr());
  auto* k1 = reinterpret_cast<Key*>(keys_alt.data_ptr());
  cub::DoubleBuffer<Key> key_buf(k0, k1);
  cub::DoubleBuffer<int> value_buf(values.data_ptr<int>(), values_alt.data_ptr<int>());
  size_t temp_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key_buf, value_buf, (int)m, 0, bits,
                                  stream);
  auto temp = at::empty({(int64_t)temp_bytes}, keys.options().dtype(at::kByte));
  cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, key_buf, value_buf, (int)m, 0,
                                  bits, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {key_buf.Current() == k0 ? keys : keys_alt,
          value_buf.Current() == values.data_ptr<int>() ? values : values_alt};
}

}  // namespace

std::vector<at::Tensor> bin_splats(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height, bool stored) {
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

  auto iopt = means2d.options().dtype(at::kInt);
  auto offsets = at::empty({c, tiles_y, tiles_x}, iopt);
  if (total == 0) {
    offsets.zero_();
    return {offsets, at::empty({0}, iopt)};
  }

  // 1. Splats by (camera, depth).
  at::Tensor order;
  {
    auto ids = at::empty({total}, iopt);
    if (c == 1) {
      auto keys = at::empty({total}, iopt);
      depth_keys_kernel<uint32_t><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          total, n, depths.data_ptr<float>(), tiles.data_ptr<int>(),
          reinterpret_cast<uint32_t*>(keys.data_ptr<int>()), ids.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      order = sort_pairs<uint32_t>(keys, ids, 32, stream).second;
    } else {
      auto keys = at::empty({total}, means2d.options().dtype(at::kLong));
      depth_keys_kernel<uint64_t><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          total, n, depths.data_ptr<float>(), tiles.data_ptr<int>(),
          reinterpret_cast<uint64_t*>(keys.data_ptr<int64_t>()), ids.data_ptr<int>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      order = sort_pairs<uint64_t>(keys, ids, 32 + bits_for(c), stream).second;
    }
  }

  // 2. Where each splat's intersections end, in that order; the last end is their count.
  auto lopt = means2d.options().dtype(at::kLong);
  auto counts = at::empty({total}, lopt);
  auto ends = at::empty({total}, lopt);
  gather_counts_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      total, order.data_ptr<int>(), tiles.data_ptr<int>(), counts.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  {
    size_t temp_bytes = 0;
    cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, counts.data_ptr<int64_t>(),
                                  ends.data_ptr<int64_t>(), total, stream);
    auto temp = at::empty({(int64_t)temp_bytes}, means2d.options().dtype(at::kByte));
    cub::DeviceScan::InclusiveSum(temp.data_ptr(), temp_bytes, counts.data_ptr<int64_t>(),
                                  ends.data_ptr<int64_t>(), total, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  counts = at::Tensor();
  int64_t m = 0;  // the step's one wait for the GPU: the intersection buffers' size
  C10_CUDA_CHECK(cudaMemcpyAsync(&m, ends.data_ptr<int64_t>() + (total - 1), sizeof(int64_t),
                                 cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  TORCH_CHECK(m < (int64_t(1) << 31), "more than 2^31 splat-tile intersections: ", m);
  if (m == 0) {
    offsets.zero_();
    return {offsets, at::empty({0}, iopt)};
  }

  // 3. One (camera, tile) key per intersection, then a stable sort on those keys only.
  auto keys = at::empty({m}, iopt);
  auto values = at::empty({m}, iopt);
  emit_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      total, n, order.data_ptr<int>(), ends.data_ptr<int64_t>(), means2d.data_ptr<float>(),
      conics.data_ptr<float>(), opacities.data_ptr<float>(), opacities.numel() == total, stored,
      radii.data_ptr<int>(), width,
      height, tiles_x, num_tiles, reinterpret_cast<uint32_t*>(keys.data_ptr<int>()),
      values.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  order = at::Tensor();
  ends = at::Tensor();
  auto sorted = sort_pairs<uint32_t>(keys, values, bits_for(c * num_tiles), stream);
  keys = at::Tensor();
  values = at::Tensor();

  tile_offsets_kernel<<<blocks_for(m, kThreads), kThreads, 0, stream>>>(
      m, reinterpret_cast<const uint32_t*>(sorted.first.data_ptr<int>()), c * num_tiles,
      offsets.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {offsets, sorted.second};
}

}  // namespace gsnb
