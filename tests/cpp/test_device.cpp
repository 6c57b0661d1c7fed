// Device dispatch without a GPU: tensors that claim to live on a CUDA device (their memory
// is never touched) drive the choice of device and kernel, and its errors.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "ir/graph.h"
#include "ops/dispatch.h"
#include "ops/op_table.h"

namespace ortmodule {
namespace {

// A tensor on `device` whose memory is never read (nothing runs a kernel on it here).
Tensor fake_tensor(Device device, DType dtype, Shape shape) {
  auto storage = std::make_shared<Storage>(nullptr, 0, nullptr);
  storage->device = device;
  return Tensor(storage, dtype, std::move(shape));
}

struct Step {
  Graph graph;
  Node* node = nullptr;
  std::vector<Tensor> tensors;

  Step(const std::string& op, int opset, std::vector<Tensor> inputs) : tensors(std::move(inputs)) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < tensors.size(); ++i)
      ins.push_back(graph.new_value("in" + std::to_string(i)));
    node = graph.add_node(op, "", ins, {graph.new_value("out")}, "node_" + op);
    node->def = find_op("", op, opset);
  }
  OpContext context() const {
    OpContext ctx{*node, {}, {}, 0};
    for (const Tensor& t : tensors) ctx.inputs.push_back(&t);
    return ctx;
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Device, HostInputsRunOnTheHost) {
  Step step(
      "Add", 14,
      {fake_tensor(Device(), DType::Float32, {2}), fake_tensor(Device(), DType::Float32, {2})});
  OpContext ctx = step.context();
  EXPECT_TRUE(step_device(ctx).is_cpu());
  EXPECT_EQ(select_kernel(ctx, Device()), step.node->def->cpu);
}

TEST(Device, CudaInputsPickTheCudaKernel) {
  const Device gpu = Device::cuda(1);
  Step step("Add", 14,
            {fake_tensor(gpu, DType::Float32, {2}), fake_tensor(gpu, DType::Float32, {2})});
  OpContext ctx = step.context();
  EXPECT_EQ(step_device(ctx), gpu);
  EXPECT_TRUE(step.node->def->cuda_twin);
  if (!cuda_backend()) {
    // This build links no CUDA kernel: the error says so and names the op and the input.
    const std::string err = error_of([&] { select_kernel(ctx, gpu); });
    EXPECT_NE(err.find("Add node 'node_Add'"), std::string::npos) << err;
    EXPECT_NE(err.find("no CUDA kernel in this build"), std::string::npos) << err;
    EXPECT_NE(err.find("input 0 ('in0') is on cuda:1"), std::string::npos) << err;
  }
}

// Every row names a CUDA kernel (or runs on the host), and this CPU-only test binary links
// none of them: a device step of Conv is refused as having no kernel in this build.
TEST(Device, OpWithoutCudaKernelNamesOpAndInput) {
  const Device gpu = Device::cuda(0);
  Step step("Conv", 11,
            {fake_tensor(gpu, DType::Float32, {1, 1, 4, 4}),
             fake_tensor(gpu, DType::Float32, {1, 1, 3, 3})});
  OpContext ctx = step.context();
  ASSERT_EQ(step_device(ctx), gpu);
  const std::string err = error_of([&] { select_kernel(ctx, gpu); });
  EXPECT_NE(err.find("Conv node 'node_Conv'"), std::string::npos) << err;
  EXPECT_NE(err.find("has no CUDA kernel in this build"), std::string::npos) << err;
  EXPECT_NE(err.find("input 0 ('in0') is on cuda:0"), std::string::npos) << err;
}

TEST(Device, TwoCudaDevicesAreRefused) {
  Step step("Mul", 14,
            {fake_tensor(Device::cuda(0), DType::Float32, {2}),
             fake_tensor(Device::cuda(1), DType::Float32, {2})});
  OpContext ctx = step.context();
  const std::string err = error_of([&] { step_device(ctx); });
  EXPECT_NE(err.find("Mul node 'node_Mul'"), std::string::npos) << err;
  EXPECT_NE(err.find("input 1 ('in1') is on cuda:1 but input 0 ('in0') is on cuda:0"),
            std::string::npos)
      << err;
}

TEST(Device, ShapeInputsStayOnTheHost) {
  // Reshape reads its shape input on the host: a host int64 shape next to device data is
  // a CUDA step, and the shape stays where it is.
  const Device gpu = Device::cuda(0);
  Step step("Reshape", 14,
            {fake_tensor(gpu, DType::Float32, {2, 3}), fake_tensor(Device(), DType::Int64, {1})});
  OpContext ctx = step.context();
  EXPECT_EQ(step_device(ctx), gpu);
  std::vector<Tensor> moved;
  place_inputs(ctx, gpu, moved);
  EXPECT_TRUE(moved.empty());
  EXPECT_TRUE(ctx.in(1).device().is_cpu());
  // Shape reads only shapes: it runs on the host whatever its input's device.
  Step shape("Shape", 15, {fake_tensor(gpu, DType::Float32, {2, 3})});
  OpContext shape_ctx = shape.context();
  EXPECT_TRUE(step_device(shape_ctx).is_cpu());
}

TEST(Device, DeviceMemoryNeedsACudaBuild) {
  if (cuda_backend()) GTEST_SKIP() << "this build has CUDA kernels";
  const std::string err = error_of([] { Tensor::empty(DType::Float32, {4}, Device::cuda(0)); });
  EXPECT_NE(
      err.find("a tensor on cuda:0 needs CUDA, but this build of ortmodule has no CUDA kernels"),
      std::string::npos)
      << err;
  // Reading a device tensor's elements on the host is refused rather than dereferenced.
  EXPECT_THROW(fake_tensor(Device::cuda(0), DType::Int64, {1}).int_at(0), std::logic_error);
}

}  // namespace
}  // namespace ortmodule
