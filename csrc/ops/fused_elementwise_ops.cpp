// FusedElementwise(inputs...; program) (ai.ortmodule): a tree of element-wise ops that
// passes/elementwise_fusion.h collapsed into one node, evaluated in one pass over memory
// (kernels/cpu/fused_elementwise.h). `program` holds four ints per instruction: opcode and
// operand registers a, b, c (-1 where unused); registers 0 .. inputs-1 are the inputs and
// instruction i writes register inputs + i; the last one is the output. The registers are
// float32 or float64, the inputs' dtype; bfloat16/float16 inputs are widened into float32
// registers and `to` (bfloat16 or float16) rounds the output once: the Casts around a tree of
// 16-bit ops computing in float32, fused (passes/elementwise_fusion.h).
#include <cstdint>
#include <string>

#include "kernels/cpu/fused_elementwise.h"
#include "ops/fused_elementwise_program.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

std::vector<ElementwiseInstruction> decode_fused_program(const OpContext& ctx,
                                                         std::vector<bool>* conditions) {
  const std::vector<int64_t> code = ctx.node.attr_ints("program");
  const int64_t num_inputs = static_cast<int64_t>(ctx.num_inputs());
  if (code.empty() || code.size() % 4 != 0)
    ctx.fail("attribute 'program' must hold 4 ints per instruction (opcode, a, b, c), got " +
             std::to_string(code.size()) + " ints");
  std::vector<ElementwiseInstruction> program;
  conditions->assign(num_inputs, false);
  std::vector<bool> read_as_value(num_inputs, false);
  for (size_t i = 0; i < code.size(); i += 4) {
    const int64_t registers = num_inputs + static_cast<int64_t>(program.size());
    const std::string where = "instruction " + std::to_string(i / 4) + " of 'program'";
    if (code[i] < 0 || code[i] >= static_cast<int64_t>(ElementwiseOpcode::kCount))
      ctx.fail(where + " has the unknown opcode " + std::to_string(code[i]));
    ElementwiseInstruction in;
    in.op = static_cast<ElementwiseOpcode>(code[i]);
    in.a = code[i + 1];
    in.b = code[i + 2];
    in.c = code[i + 3];
    const int arity = elementwise_opcode_arity(in.op);
    const int64_t operands[3] = {in.a, in.b, in.c};
    for (int k = 0; k < 3; ++k) {
      const int64_t r = operands[k];
      if (k < arity ? (r < 0 || r >= registers) : r != -1)
        ctx.fail(where + " reads operand " + std::to_string(k) + " = register " +
                 std::to_string(r) + "; expected " +
                 (k < arity ? "one of the " + std::to_string(registers) + " written before it"
                            : std::string("-1 (the opcode takes ") + std::to_string(arity) +
                                  " operands)"));
      if (k < arity && r < num_inputs) {
        const bool condition = in.op == ElementwiseOpcode::kWhere && k == 0;
        (condition ? (*conditions)[r] : read_as_value[r]) = true;
      }
    }
    program.push_back(in);
  }
  for (int64_t r = 0; r < num_inputs; ++r)
    if ((*conditions)[r] && read_as_value[r])
      ctx.fail("input " + std::to_string(r) + " is read both as a Where condition and as a value");
  return program;
}

namespace {
bool is_16_bit(DType d) { return d == DType::BFloat16 || d == DType::Float16; }
FusedStorage storage_of(DType d) {
  return d == DType::BFloat16  ? FusedStorage::kBFloat16
         : d == DType::Float16 ? FusedStorage::kFloat16
                               : FusedStorage::kNative;
}
}  // namespace

DType fused_elementwise_registers(const OpContext& ctx, const std::vector<bool>& conditions) {
  DType dtype = DType::Undefined;
  bool widened = false;
  for (size_t k = 0; k < ctx.num_inputs(); ++k) {
    const DType d = ctx.in(k).dtype();
    if (conditions[k]) {
      if (d != DType::Bool)
        ctx.fail("input " + std::to_string(k) + " is a Where condition and must be bool, got " +
                 dtype_name(d));
    } else if (is_16_bit(d)) {
      widened = true;
    } else if (dtype == DType::Undefined) {
      dtype = d;
    } else if (d != dtype) {
      ctx.fail("input " + std::to_string(k) + " has dtype " + dtype_name(d) +
               ", the other values " + dtype_name(dtype) + "; all must match (or be 16-bit)");
    }
  }
  if (dtype == DType::Undefined && widened) dtype = DType::Float32;
  if (dtype != DType::Float32 && dtype != DType::Float64)
    ctx.fail("dtype " + dtype_name(dtype) + " is not supported (float32, float64)");
  if (widened && dtype != DType::Float32)
    ctx.fail("16-bit inputs widen into float32 registers; the other values are " +
             dtype_name(dtype));
  return dtype;
}

DType fused_elementwise_output(const OpContext& ctx, DType registers) {
  const DType to = static_cast<DType>(ctx.node.attr_int("to", static_cast<int64_t>(registers)));
  if (to != registers && !(registers == DType::Float32 && is_16_bit(to)))
    ctx.fail("'to' = " + dtype_name(to) + " is not the registers' dtype (" + dtype_name(registers) +
             ") nor bfloat16/float16 from float32 registers");
  return to;
}

std::vector<OutputInfo> shape_fused_elementwise(const OpContext& ctx) {
  std::vector<bool> conditions;
  decode_fused_program(ctx, &conditions);
  const DType registers = fused_elementwise_registers(ctx, conditions);
  Shape out;
  for (size_t k = 0; k < ctx.num_inputs(); ++k)
    out = k == 0 ? ctx.in(k).shape() : broadcast_shapes(ctx, out, ctx.in(k).shape());
  return one_output(fused_elementwise_output(ctx, registers), out);
}

std::vector<FusedElementwiseInput> fused_elementwise_inputs(const OpContext& ctx,
                                                            const std::vector<bool>& conditions) {
  std::vector<FusedElementwiseInput> inputs(ctx.num_inputs());
  for (size_t k = 0; k < inputs.size(); ++k) {
    inputs[k].data = ctx.in(k).raw();
    inputs[k].is_bool = conditions[k];
    inputs[k].storage = conditions[k] ? FusedStorage::kNative : storage_of(ctx.in(k).dtype());
    inputs[k].shape = ctx.in(k).shape();
  }
  return inputs;
}

void cpu_fused_elementwise(OpContext& ctx) {
  std::vector<bool> conditions;
  const std::vector<ElementwiseInstruction> program = decode_fused_program(ctx, &conditions);
  const std::vector<FusedElementwiseInput> inputs = fused_elementwise_inputs(ctx, conditions);
  Tensor& y = ctx.out(0);
  ORTM_DISPATCH_FLOAT(fused_elementwise_registers(ctx, conditions), ctx,
                      fused_elementwise_forward<scalar_t>(inputs, program, y.shape(), y.raw(),
                                                          storage_of(y.dtype())));
}

}  // namespace ortmodule
