// The per-matrix tolerances of Pinv and MatrixRank (linalg_spectral_ops.cpp), shared with
// their CUDA twins: the atol and rtol attributes, or the optional atol (input 1) and rtol
// (input 2) tensors broadcast over the batch (read on the host).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

// {atol, rtol} for each of the `batch` matrices of input 0 (rtol < 0: torch's default).
struct SpectralTolerances {
  std::vector<double> atol, rtol;
};
SpectralTolerances spectral_tolerances(const OpContext& ctx);

}  // namespace ortmodule
