#include "python/torch_call.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/extension.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "ops/host_bridge.h"
#include "python/torch_boundary.h"

namespace py = pybind11;

namespace ortmodule {

namespace {

// ---- registered Python callables ----

std::mutex callables_mutex;
// Never destroyed: entries are Python objects, which must not be released after the
// interpreter has finalized. Entries are released by their compiled graph instead.
auto* callables = new std::unordered_map<int64_t, py::object>();
int64_t next_callable_id = 1;

py::object find_callable(const Node& node, int64_t id) {
  std::lock_guard<std::mutex> lock(callables_mutex);
  auto it = callables->find(id);
  if (it == callables->end()) {
    throw std::runtime_error(node.describe() + " calls Python callable #" + std::to_string(id) +
                             ", which was released with the graph that registered it");
  }
  return it->second;
}

// ---- what backward needs of one forward call ----

struct CallRecord {
  std::vector<at::Tensor> leaves;   // distinct inputs that require grad
  std::vector<int> leaf_of_input;   // per input: its leaf, or -1
  std::vector<bool> first_use;      // per input: the first position holding its leaf
  std::vector<at::Tensor> outputs;  // the call's results, with their autograd history
  // Inputs backward wants a gradient for that autograd cannot track (integer dtypes): their
  // gradient is zero, as for a tensor that does not require grad.
  std::unordered_map<size_t, std::pair<std::vector<int64_t>, at::ScalarType>> untracked;
};

// ---- ATen ops: arguments encoded by ortmodule/capture/torch_onnx/aten_bridge.py ----
//
// One string per schema argument: "t" the next tensor input, "n" None, "b:0"/"b:1",
// "i:<int>", "f:<hex float>", "s:<text>", "v" an int held by the next tensor input (a
// symbolic size), lists "I:<ints and v>", "F:<floats>", "B:<bools>", "T:<t or n per
// element>" (tensors, None for an omitted optional one).

struct ArgReader {
  const Node& node;
  const std::vector<at::Tensor>& tensors;
  size_t next = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("cannot call the ATen op of " + node.describe() + ": " + what);
  }
  const at::Tensor& tensor() {
    if (next >= tensors.size()) fail("more tensor arguments than inputs");
    return tensors[next++];
  }
  int64_t symbolic_int() { return tensor().item<int64_t>(); }
};

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) parts.push_back(item);
  return parts;
}

c10::IValue decode_string(ArgReader& r, const std::string& text, const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::DeviceObjType:
      return c10::Device(text);
    case c10::TypeKind::LayoutType:
      if (text == "torch.strided") return at::kStrided;
      break;
    case c10::TypeKind::MemoryFormatType:
      if (text == "torch.contiguous_format") return at::MemoryFormat::Contiguous;
      if (text == "torch.preserve_format") return at::MemoryFormat::Preserve;
      if (text == "torch.channels_last") return at::MemoryFormat::ChannelsLast;
      break;
    default:
      return text;
  }
  r.fail("unsupported " + type->str() + " argument '" + text + "'");
}

c10::IValue decode_list(ArgReader& r, char kind, const std::string& body,
                        const c10::TypePtr& type) {
  std::vector<std::string> items = split(body);
  switch (kind) {
    case 'I': {
      std::vector<int64_t> v;
      for (const std::string& s : items) v.push_back(s == "v" ? r.symbolic_int() : std::stoll(s));
      return v;
    }
    case 'F': {
      std::vector<double> v;
      for (const std::string& s : items) v.push_back(std::strtod(s.c_str(), nullptr));
      return v;
    }
    case 'B': {
      c10::List<bool> v;
      for (const std::string& s : items) v.push_back(s == "1");
      return v;
    }
    case 'T': {
      auto list = type->cast<c10::ListType>();
      if (list && list->getElementType()->kind() == c10::TypeKind::OptionalType) {
        c10::List<std::optional<at::Tensor>> v;
        for (char c : body)
          v.push_back(c == 't' ? std::optional<at::Tensor>(r.tensor()) : std::nullopt);
        return v;
      }
      std::vector<at::Tensor> v;
      for (char c : body) {
        if (c != 't') r.fail("a None inside a list of tensors");
        v.push_back(r.tensor());
      }
      return v;
    }
    default:
      r.fail("unknown list code '" + std::string(1, kind) + "'");
  }
}

c10::IValue decode(ArgReader& r, const std::string& code, const c10::Argument& arg) {
  // The real type tells dtype, layout and memory-format arguments from plain ints.
  c10::TypePtr type = arg.real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  if (code == "t") return r.tensor();
  if (code == "n") return c10::IValue();
  if (code == "v") return r.symbolic_int();
  if (code.size() < 2 || code[1] != ':') r.fail("malformed argument code '" + code + "'");
  const std::string body = code.substr(2);
  switch (code[0]) {
    case 'b':
      return body == "1";
    case 'i':
      // The exporter passes dtypes as ONNX element types, which DType mirrors.
      if (type->kind() == c10::TypeKind::ScalarTypeType)
        return dtype_to_torch(static_cast<DType>(std::stoll(body)));
      return static_cast<int64_t>(std::stoll(body));
    case 'f':
      return std::strtod(body.c_str(), nullptr);
    case 's':
      return decode_string(r, body, type);
    default:
      return decode_list(r, code[0], body, type);
  }
}

std::vector<at::Tensor> call_aten(const Node& node, const std::vector<at::Tensor>& args) {
  const std::string name = node.attr_string("aten_op", "");
  const std::string overload = node.attr_string("aten_overload", "");
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  ArgReader reader{node, args};
  if (!op) reader.fail("PyTorch has no op " + name + (overload.empty() ? "" : "." + overload));
  const c10::FunctionSchema& schema = op->schema();
  const Attribute* codes = node.attr("args");
  if (!codes || codes->strings.size() != schema.arguments().size()) {
    reader.fail("the node encodes " + std::to_string(codes ? codes->strings.size() : 0) +
                " arguments for a schema with " + std::to_string(schema.arguments().size()));
  }
  torch::jit::Stack stack;
  for (size_t k = 0; k < schema.arguments().size(); ++k)
    stack.push_back(decode(reader, codes->strings[k], schema.arguments()[k]));
  op->callBoxed(stack);
  std::vector<at::Tensor> results;
  for (const c10::IValue& v : stack) {
    if (v.isTensor()) {
      results.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorVector()) results.push_back(t);
    } else {
      reader.fail("it returned a " + v.tagKind() + ", not tensors");
    }
  }
  return results;
}

std::vector<at::Tensor> call_python(const Node& node, const std::vector<at::Tensor>& args) {
  py::gil_scoped_acquire gil;
  py::object fn = find_callable(node, node.attr_int("callable_id", -1));
  py::tuple py_args(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    py_args[i] = args[i].defined() ? py::cast(args[i]) : py::none();
  py::object result = fn(*py_args);
  std::vector<at::Tensor> outputs;
  for (py::handle item : result) outputs.push_back(py::cast<at::Tensor>(item));
  return outputs;
}

class TorchBridge : public HostBridge {
 public:
  std::vector<Tensor> forward(const Node& node, const std::vector<const Tensor*>& inputs,
                              const std::vector<bool>& requires_grad,
                              std::shared_ptr<void>* handle) override {
    auto record = std::make_shared<CallRecord>();
    std::vector<at::Tensor> args;
    // The same engine value at several positions is one tensor, as in eager PyTorch; its
    // gradient is reported once.
    std::unordered_map<const Tensor*, size_t> position;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor* in = inputs[i];
      auto seen = in ? position.find(in) : position.end();
      if (seen != position.end()) {
        args.push_back(args[seen->second]);
        record->leaf_of_input.push_back(record->leaf_of_input[seen->second]);
        record->first_use.push_back(false);
        continue;
      }
      at::Tensor t = in ? to_torch(*in) : at::Tensor();
      int leaf = -1;
      if (in && requires_grad[i] && t.is_floating_point()) {
        t.requires_grad_(true);
        leaf = static_cast<int>(record->leaves.size());
        record->leaves.push_back(t);
      } else if (in && requires_grad[i]) {
        record->untracked[i] = {t.sizes().vec(), t.scalar_type()};
      }
      if (in) position[in] = i;
      args.push_back(t);
      record->leaf_of_input.push_back(leaf);
      record->first_use.push_back(true);
    }
    std::vector<at::Tensor> results;
    {
      at::AutoGradMode grad_mode(!record->leaves.empty());
      results = node.has_attr("callable_id") ? call_python(node, args) : call_aten(node, args);
    }
    std::vector<Tensor> outputs;
    for (const at::Tensor& r : results) {
      if (!r.defined()) {
        throw std::runtime_error(node.describe() +
                                 ": the PyTorch call returned None where the "
                                 "exported graph has a tensor");
      }
      outputs.push_back(from_torch(r.detach(), "output of", node.name));
    }
    if (handle) {
      record->outputs = std::move(results);
      *handle = std::move(record);
    }
    return outputs;
  }

  std::vector<Tensor> backward(const Node& node, const std::shared_ptr<void>& handle,
                               const std::vector<const Tensor*>& output_grads,
                               const std::vector<bool>& wanted) override {
    const auto& record = *std::static_pointer_cast<CallRecord>(handle);
    std::vector<at::Tensor> outputs, grads;
    for (size_t i = 0; i < record.outputs.size() && i < output_grads.size(); ++i) {
      if (!output_grads[i] || !record.outputs[i].requires_grad()) continue;
      outputs.push_back(record.outputs[i]);
      grads.push_back(to_torch(*output_grads[i]));
    }
    std::vector<at::Tensor> leaf_grads(record.leaves.size());
    if (!outputs.empty() && !record.leaves.empty()) {
      // retain_graph of the outer backward keeps this call's graph for the next one.
      const bool keep = torch::autograd::get_current_graph_task_keep_graph();
      leaf_grads = torch::autograd::grad(outputs, record.leaves, grads, keep,
                                         /*create_graph=*/false, /*allow_unused=*/true);
    }
    std::vector<Tensor> result(wanted.size());
    for (size_t i = 0; i < wanted.size() && i < record.leaf_of_input.size(); ++i) {
      const int leaf = record.leaf_of_input[i];
      if (!wanted[i]) continue;
      if (leaf < 0) {
        auto it = record.untracked.find(i);
        if (it == record.untracked.end()) {
          throw std::runtime_error(node.describe() + ": input " + std::to_string(i) +
                                   " needs a gradient but forward did not track it");
        }
        result[i] = from_torch(at::zeros(it->second.first, at::TensorOptions(it->second.second)),
                               "gradient of input of", node.name);
        continue;
      }
      const at::Tensor& g = leaf_grads[static_cast<size_t>(leaf)];
      at::Tensor value = record.first_use[i] && g.defined()
                             ? g
                             : at::zeros_like(record.leaves[static_cast<size_t>(leaf)]);
      result[i] = from_torch(value.detach(), "gradient of input of", node.name);
    }
    return result;
  }
};

}  // namespace

void install_torch_bridge() {
  static TorchBridge* bridge = new TorchBridge();
  set_host_bridge(bridge);
}

int64_t register_callable(py::function fn) {
  std::lock_guard<std::mutex> lock(callables_mutex);
  const int64_t id = next_callable_id++;
  (*callables)[id] = std::move(fn);
  return id;
}

void release_callable(int64_t id) {
  py::object fn;
  {
    std::lock_guard<std::mutex> lock(callables_mutex);
    auto it = callables->find(id);
    if (it == callables->end()) return;
    fn = std::move(it->second);
    callables->erase(it);
  }
  // fn is released here, outside the lock (its closure may release other callables).
}

}  // namespace ortmodule
