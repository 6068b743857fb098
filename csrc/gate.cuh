// The step gate: a training step launches its updates before it reads its numbers back, and
// each update reads the gate (float64 [3] on the device: the gradients' sum of squares, their
// count of non-finite values, the loss) to change nothing on a step the trainer skips.
#pragma once

#include <cuda_runtime.h>

namespace gsnb {

constexpr double kFloat32Max = 3.4028234663852886e38;

// Whether a gated update goes ahead: no gate, or a sum that fits a float32, no non-finite
// gradient and a finite loss (the rule of gsnb.train.health.signals_from_sums).
__device__ __forceinline__ bool gate_open(const double* gate) {
  return gate == nullptr || (gate[0] <= kFloat32Max && gate[1] == 0.0 && isfinite(gate[2]));
}

}  // namespace gsnb
