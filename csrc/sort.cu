// The cub sort and scan of tile binning, alone in their own file: cub's device-wide
// algorithms are the slowest code to compile, so they build in parallel with the rest.
// One instantiation of each: 32-bit keys with int values, and an int64 inclusive sum.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "launch.h"

namespace gsnb {

void radix_sort_pairs(void* temp, size_t& temp_bytes, uint32_t* keys, uint32_t* keys_alt,
                      int* values, int* values_alt, int64_t m, int bits, cudaStream_t stream,
                      uint32_t** keys_out, int** values_out) {
  cub::DoubleBuffer<uint32_t> key_buf(keys, keys_alt);
  cub::DoubleBuffer<int> value_buf(values, values_alt);
  cub::DeviceRadixSort::SortPairs(temp, temp_bytes, key_buf, value_buf, (int)m, 0, bits, stream);
  if (temp == nullptr) return;
  *keys_out = key_buf.Current();
  *values_out = value_buf.Current();
}

void inclusive_sum(void* temp, size_t& temp_bytes, const int64_t* in, int64_t* out,
                   int64_t total, cudaStream_t stream) {
  cub::DeviceScan::InclusiveSum(temp, temp_bytes, in, out, total, stream);
}

}  // namespace gsnb
