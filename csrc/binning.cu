// Tile binning: every (camera, tile, splat) intersection gets a 64-bit key
// [camera | tile | depth], sorted by radix sort so that each tile's splats are
// contiguous and ordered front to back; then the start of each tile's range.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"
#include "ops.h"

namespace gsnb {
namespace {

__global__ void emit_keys_kernel(
    int num_cams, int n, const float* __restrict__ means2d, const float* __restrict__ conics,
    const float* __restrict__ opacities, const float* __restrict__ depths,
    const int* __restrict__ radii, const int* __restrict__ ends, int width, int height,
    int tiles_x, int tile_bits, int64_t* __restrict__ keys, int* __restrict__ values) {
  const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (int64_t)num_cams * n) return;
  if (radii[idx * 2] <= 0) return;
  const int cid = idx / n;
  const int gid = idx % n;
  int pos = idx == 0 ? 0 : ends[idx - 1];
  const int end = ends[idx];
  if (pos == end) return;
  float r2;
  if (!extent2(opacities[gid], &r2)) return;
  const int64_t depth_bits = (int64_t)__float_as_uint(depths[idx]);
  const int64_t cam_key = (int64_t)cid << (32 + tile_bits);
  for_each_tile(
      means2d[idx * 2], means2d[idx * 2 + 1], conics[idx * 3], conics[idx * 3 + 1],
      conics[idx * 3 + 2], r2, radii[idx * 2 + 1], width, height, [&](int tx, int ty) {
        if (pos < end) {
          keys[pos] = cam_key | ((int64_t)(ty * tiles_x + tx) << 32) | depth_bits;
          values[pos] = (int)idx;
        }
        ++pos;
      });
}

// offsets[t] = index of the first intersection whose (camera, tile) is >= t,
// with t = camera * num_tiles + tile.
__device__ __forceinline__ int64_t tile_slot(int64_t key, int tile_bits, int64_t num_tiles) {
  const int64_t cam = key >> (32 + tile_bits);
  const int64_t tile = (key >> 32) & ((int64_t(1) << tile_bits) - 1);
  return cam * num_tiles + tile;
}

__global__ void tile_offsets_kernel(
    int64_t m, const int64_t* __restrict__ keys, int tile_bits, int64_t num_tiles,
    int64_t num_slots, int* __restrict__ offsets) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int64_t cur = tile_slot(keys[i], tile_bits, num_tiles);
  const int64_t prev = i == 0 ? -1 : tile_slot(keys[i - 1], tile_bits, num_tiles);
  for (int64_t t = prev + 1; t <= cur; ++t) offsets[t] = (int)i;
  if (i == m - 1)
    for (int64_t t = cur + 1; t < num_slots; ++t) offsets[t] = (int)m;
}

int bits_for(int64_t n) {
  int bits = 0;
  while ((int64_t(1) << bits) < n) ++bits;
  return bits;
}

}  // namespace

std::vector<at::Tensor> bin_splats(
    const at::Tensor& means2d, const at::Tensor& conics, const at::Tensor& opacities,
    const at::Tensor& depths, const at::Tensor& radii, const at::Tensor& tiles, int64_t width,
    int64_t height) {
  const c10::cuda::OptionalCUDAGuard guard(means2d.device());
  auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t c = means2d.size(0), n = means2d.size(1);
  const int tiles_x = (width + kTile - 1) / kTile;
  const int tiles_y = (height + kTile - 1) / kTile;
  const int64_t num_tiles = (int64_t)tiles_x * tiles_y;
  const int tile_bits = bits_for(num_tiles);
  const int cam_bits = bits_for(c);
  TORCH_CHECK(32 + tile_bits + cam_bits <= 63, "too many cameras or tiles for a 64-bit sort key");

  const int64_t m = c * n > 0 ? tiles.sum(at::kLong).item<int64_t>() : 0;
  TORCH_CHECK(m < (int64_t(1) << 31), "more than 2^31 splat-tile intersections: ", m);
  auto iopt = means2d.options().dtype(at::kInt);
  auto offsets = at::empty({c, tiles_y, tiles_x}, iopt);
  if (m == 0) {
    offsets.zero_();
    return {offsets, at::empty({0}, iopt)};
  }
  auto ends = at::cumsum(tiles.reshape({-1}), 0, at::kInt);
  auto keys = at::empty({m}, means2d.options().dtype(at::kLong));
  auto values = at::empty({m}, iopt);
  emit_keys_kernel<<<(c * n + 255) / 256, 256, 0, stream>>>(
      c, n, means2d.data_ptr<float>(), conics.data_ptr<float>(), opacities.data_ptr<float>(),
      depths.data_ptr<float>(), radii.data_ptr<int>(), ends.data_ptr<int>(), width, height,
      tiles_x, tile_bits, keys.data_ptr<int64_t>(), values.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  ends = at::Tensor();  // free before the sort

  // Sort with cub's double buffers: the temporary storage stays small (no third copy).
  auto keys_alt = at::empty_like(keys);
  auto values_alt = at::empty_like(values);
  cub::DoubleBuffer<uint64_t> key_buf(reinterpret_cast<uint64_t*>(keys.data_ptr<int64_t>()),
                                      reinterpret_cast<uint64_t*>(keys_alt.data_ptr<int64_t>()));
  cub::DoubleBuffer<int> value_buf(values.data_ptr<int>(), values_alt.data_ptr<int>());
  const int end_bit = 32 + tile_bits + cam_bits;
  size_t temp_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key_buf, value_buf, (int)m, 0, end_bit,
                                  stream);
  auto temp = at::empty({(int64_t)temp_bytes}, means2d.options().dtype(at::kByte));
  cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, key_buf, value_buf, (int)m, 0,
                                  end_bit, stream);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  temp = at::Tensor();
  const bool keys_in_first = key_buf.Current() == reinterpret_cast<uint64_t*>(keys.data_ptr<int64_t>());
  const at::Tensor& keys_sorted = keys_in_first ? keys : keys_alt;
  const bool values_in_first = value_buf.Current() == values.data_ptr<int>();
  at::Tensor values_sorted = values_in_first ? values : values_alt;

  tile_offsets_kernel<<<(m + 255) / 256, 256, 0, stream>>>(
      m, keys_sorted.data_ptr<int64_t>(), tile_bits, num_tiles, c * num_tiles,
      offsets.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {offsets, values_sorted};
}

}  // namespace gsnb
