// The op table's row builder, shared by the files that list rows (op_table.cpp: the ops
// exporters emit; op_table_internal.cpp: the ops gradient rules and training graphs emit).
// Internal to csrc/ops.
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "ops/op_table.h"

namespace ortmodule {
namespace op_rows {

inline constexpr const char* kMs = "com.microsoft";
inline constexpr const char* kOwn = "ai.ortmodule";

struct Row {
  OpDef def;
  Row(const char* domain, const char* op, int since, ShapeFn shape, KernelFn cpu, GradFn grad) {
    def.domain = domain;
    def.op_type = op;
    def.since_version = since;
    def.shape = shape;
    def.cpu = cpu;
    def.grad = grad;
  }
  // The last opset version of the op's domain the row covers (a newer row takes over).
  Row& until(int version) {
    def.until_version = version;
    return *this;
  }
  // The CUDA twin of the CPU kernel, and the inputs it reads on the host.
  Row& cuda(KernelFn kernel, std::initializer_list<int> host_inputs = {}) {
    def.cuda = kernel;
    def.cuda_twin = true;
    for (int i : host_inputs) def.cuda_host_inputs |= 1u << i;
    return *this;
  }
  // Variadic shape inputs: input `first` and every later one are read on the host.
  Row& cuda_host_inputs_from(int first) {
    for (int i = first; i < 32; ++i) def.cuda_host_inputs |= 1u << i;
    return *this;
  }
  Row& reads_shapes_only() {
    def.reads_shapes_only = true;
    return *this;
  }
  Row& runs_on_host() {
    def.runs_on_host = true;
    return *this;
  }
  Row& inplace(int input) {
    def.inplace_input = input;
    return *this;
  }
  Row& tolerance(double rtol, double atol) {
    def.grad_rtol = rtol;
    def.grad_atol = atol;
    return *this;
  }
  Row& internal() {
    def.internal = true;
    def.differentiable = false;
    return *this;
  }
  Row& random() {
    def.random = true;
    return *this;
  }
  Row& host_call() {
    def.host_call = true;
    return *this;
  }
  Row& no_grad_inputs(std::initializer_list<int> inputs) {
    for (int i : inputs) def.no_grad_inputs |= 1u << i;
    return *this;
  }
  Row& not_differentiable() {
    def.differentiable = false;
    return *this;
  }
  Row& zero_gradient() {
    def.differentiable = false;
    def.zero_gradient = true;
    return *this;
  }
  Row& grad_outputs(int n) {
    def.grad_outputs = n;
    return *this;
  }
  Row& writeback(std::vector<std::pair<int, int>> pairs) {
    def.state_writeback = std::move(pairs);
    return *this;
  }
  operator OpDef() const { return def; }
};

// The rows of ops that gradient rules, graph rewrites and training graphs emit (after the
// exporter-facing rows in the table).
std::vector<OpDef> internal_rows();
// The rows of op families listed in their own files (op_table_<family>.cpp), appended by
// op_table.cpp's build_table.
std::vector<OpDef> math_rows();
std::vector<OpDef> linalg_qr_rows();
std::vector<OpDef> linalg_spectral_rows();
std::vector<OpDef> scatter_extra_rows();
std::vector<OpDef> sort_search_rows();
std::vector<OpDef> linalg_lu_rows();

}  // namespace op_rows
}  // namespace ortmodule
