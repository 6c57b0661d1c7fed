// The checked dimensions of the LU family's ops (LUFactor, LUUnpack, TriangularSolve, Det,
// SlogDet; linalg_lu_ops.cpp), shared by the CPU kernels and the CUDA twins.
#pragma once

#include <cstdint>

#include "kernels/math/linalg_lu.h"
#include "ops/op_table.h"

namespace ortmodule {

// A batch of [m, n] matrices: input `input`'s trailing two dims, the leading ones flattened.
struct MatrixBatch {
  int64_t batch = 0, m = 0, n = 0;
  int64_t k() const { return m < n ? m : n; }
};

// Input `input` as a batch of matrices (rank >= 2; square when `square`, naming `op`).
MatrixBatch matrix_batch(const OpContext& ctx, size_t input, bool square);

// TriangularSolve(A, B): the system of each matrix, the output's batch (A's and B's batch
// dims broadcast) and where each output matrix reads A and B.
struct TriangularSolveDims {
  math::TriangularSystem system;
  math::BatchBroadcast batches;
  int64_t batch = 0;
  Shape out;
};
TriangularSolveDims triangular_solve_dims(const OpContext& ctx);

// LUFactor's check_errors: fails naming the first singular matrix of `info` [batch].
void lu_check_info(const OpContext& ctx, const int32_t* info, int64_t batch);

}  // namespace ortmodule
