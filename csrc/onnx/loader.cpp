#include "onnx/loader.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "base/allocator.h"
#include "onnx/packed_bits.h"
#include "ortmodule_onnx.pb.h"

namespace ortmodule {
namespace {

namespace pb = ::ortmodule_onnx;

[[noreturn]] void load_error(const std::string& what) {
  throw std::invalid_argument("invalid ONNX model: " + what);
}

template <typename Src, typename Dst>
void copy_field(const Src& field, Tensor& t, const std::string& name) {
  if (static_cast<int64_t>(field.size()) != t.numel()) {
    load_error("tensor '" + name + "' data has " + std::to_string(field.size()) +
               " elements, its shape " + shape_str(t.shape()) + " says " +
               std::to_string(t.numel()));
  }
  Dst* out = t.data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

// Dims of a tensor or value: non-negative, with a product that fits int64 and a byte size
// that fits size_t.
void check_dims(const std::string& what, const Shape& shape, DType dt) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      load_error(what + " has dimension " + std::to_string(shape[i]) + " at position " +
                 std::to_string(i) + " of shape " + shape_str(shape) +
                 "; dimensions must be non-negative");
    }
  }
  const int64_t numel = shape_numel_checked(shape);
  const size_t bytes = numel < 0 ? SIZE_MAX : tensor_bytes_checked(numel, dt);
  if (bytes == SIZE_MAX) {
    load_error(what + " has shape " + shape_str(shape) +
               " whose element count or byte size would overflow");
  }
  if (bytes > allocator_limit()) {
    load_error(what + " has shape " + shape_str(shape) + " of " + std::to_string(bytes) +
               " bytes: too large (the allocation limit is " + std::to_string(allocator_limit()) +
               " bytes)");
  }
}

Tensor tensor_from_proto(const pb::TensorProto& tp) {
  if (!dtype_is_supported(tp.data_type())) {
    load_error("tensor '" + tp.name() + "' has unsupported ONNX data type " +
               std::to_string(tp.data_type()));
  }
  if (tp.data_location() == pb::TensorProto::EXTERNAL) {
    load_error("tensor '" + tp.name() +
               "' stores its data externally; save the model with its data inline");
  }
  DType dt = static_cast<DType>(tp.data_type());
  Shape shape(tp.dims().begin(), tp.dims().end());
  check_dims("tensor '" + tp.name() + "'", shape, dt);
  Tensor t = Tensor::empty(dt, shape);
  const int bits = dtype_packed_bits(dt);
  if (bits < 8) {
    // Sub-byte elements: raw_data, or int32_data with one packed byte per entry (one
    // element per entry for the 6-bit types), as onnx's numpy_helper reads them.
    const size_t need = packed_size(t.numel(), bits);
    std::string packed;
    if (tp.has_raw_data()) {
      packed = tp.raw_data();
      // A 6-bit stream may run to the end of its last 3-byte group.
      const size_t most = bits == 6 ? static_cast<size_t>((t.numel() + 3) / 4 * 3) : need;
      if (packed.size() < need || packed.size() > most) {
        load_error("tensor '" + tp.name() + "' has " + std::to_string(packed.size()) +
                   " bytes of raw data, expected " + std::to_string(need) + " (" +
                   std::to_string(t.numel()) + " " + dtype_name(dt) + " elements packed)");
      }
    } else if (bits == 6) {
      copy_field<decltype(tp.int32_data()), uint8_t>(tp.int32_data(), t, tp.name());
      for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] &= 0x3f;
      return t;
    } else {
      if (static_cast<size_t>(tp.int32_data().size()) != need) {
        load_error("tensor '" + tp.name() + "' has " + std::to_string(tp.int32_data().size()) +
                   " int32_data entries, expected " + std::to_string(need) + " (" +
                   std::to_string(t.numel()) + " " + dtype_name(dt) + " elements packed)");
      }
      for (int32_t v : tp.int32_data()) packed.push_back(static_cast<char>(v & 0xff));
    }
    unpack_bits(reinterpret_cast<const uint8_t*>(packed.data()), t.numel(), bits,
                t.data<uint8_t>());
    return t;
  }
  if (tp.has_raw_data()) {
    if (tp.raw_data().size() != t.nbytes()) {
      load_error("tensor '" + tp.name() + "' has " + std::to_string(tp.raw_data().size()) +
                 " bytes of raw data, expected " + std::to_string(t.nbytes()));
    }
    if (t.nbytes()) std::memcpy(t.raw(), tp.raw_data().data(), t.nbytes());
    return t;
  }
  switch (dt) {
    case DType::Float32:
      copy_field<decltype(tp.float_data()), float>(tp.float_data(), t, tp.name());
      break;
    case DType::Float64:
      copy_field<decltype(tp.double_data()), double>(tp.double_data(), t, tp.name());
      break;
    case DType::Int64:
      copy_field<decltype(tp.int64_data()), int64_t>(tp.int64_data(), t, tp.name());
      break;
    case DType::Int32:
      copy_field<decltype(tp.int32_data()), int32_t>(tp.int32_data(), t, tp.name());
      break;
    case DType::Int8:
      copy_field<decltype(tp.int32_data()), int8_t>(tp.int32_data(), t, tp.name());
      break;
    case DType::Int16:
      copy_field<decltype(tp.int32_data()), int16_t>(tp.int32_data(), t, tp.name());
      break;
    case DType::UInt16:
      copy_field<decltype(tp.int32_data()), uint16_t>(tp.int32_data(), t, tp.name());
      break;
    case DType::UInt32:
      copy_field<decltype(tp.uint64_data()), uint32_t>(tp.uint64_data(), t, tp.name());
      break;
    case DType::UInt64:
      copy_field<decltype(tp.uint64_data()), uint64_t>(tp.uint64_data(), t, tp.name());
      break;
    case DType::UInt8:
    case DType::Bool:
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
      copy_field<decltype(tp.int32_data()), uint8_t>(tp.int32_data(), t, tp.name());
      break;
    case DType::Float16:
    case DType::BFloat16:
      copy_field<decltype(tp.int32_data()), uint16_t>(tp.int32_data(), t, tp.name());
      break;
    default:
      load_error("tensor '" + tp.name() + "' has no data");
  }
  return t;
}

Attribute attribute_from_proto(const pb::AttributeProto& ap, const std::string& node) {
  Attribute a;
  switch (ap.type()) {
    case pb::AttributeProto::INT:
      a.kind = Attribute::Kind::Int;
      a.i = ap.i();
      break;
    case pb::AttributeProto::FLOAT:
      a.kind = Attribute::Kind::Float;
      a.f = ap.f();
      break;
    case pb::AttributeProto::STRING:
      a.kind = Attribute::Kind::String;
      a.s = ap.s();
      break;
    case pb::AttributeProto::INTS:
      a.kind = Attribute::Kind::Ints;
      a.ints.assign(ap.ints().begin(), ap.ints().end());
      break;
    case pb::AttributeProto::FLOATS:
      a.kind = Attribute::Kind::Floats;
      a.floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case pb::AttributeProto::STRINGS:
      a.kind = Attribute::Kind::Strings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      break;
    case pb::AttributeProto::TENSOR:
      a.kind = Attribute::Kind::Tensor;
      a.t = tensor_from_proto(ap.t());
      a.t.storage()->writable = false;
      break;
    default:
      load_error("attribute '" + ap.name() + "' of node '" + node + "' has unsupported type " +
                 std::to_string(ap.type()));
  }
  return a;
}

void set_type(Value* v, const pb::ValueInfoProto& vi) {
  if (!vi.has_type() || !vi.type().has_tensor_type()) return;
  const auto& tt = vi.type().tensor_type();
  if (tt.elem_type() != 0) {
    if (!dtype_is_supported(tt.elem_type())) {
      load_error("value '" + vi.name() + "' has unsupported ONNX data type " +
                 std::to_string(tt.elem_type()));
    }
    v->dtype = static_cast<DType>(tt.elem_type());
  }
  if (tt.has_shape()) {
    v->has_shape = true;
    v->shape.clear();
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value() && d.dim_value() < 0) {
        load_error("value '" + vi.name() + "' has dimension " + std::to_string(d.dim_value()) +
                   " in its declared shape; dimensions must be non-negative");
      }
      v->shape.push_back(d.has_dim_value() ? Dim{d.dim_value(), ""} : Dim{-1, d.dim_param()});
    }
  }
}

// The exporter's doc_string is a Python stack, innermost frame first, one
// "file(line): function" per line. The first frame outside torch's own package is the
// user's code; otherwise the innermost frame.
std::string source_of(const std::string& doc) {
  std::string first;
  size_t start = 0;
  while (start < doc.size()) {
    size_t end = doc.find('\n', start);
    if (end == std::string::npos) end = doc.size();
    std::string frame = doc.substr(start, end - start);
    start = end + 1;
    if (frame.empty()) continue;
    if (first.empty()) first = frame;
    if (frame.find("/torch/") == std::string::npos) return frame;
  }
  return first;
}

int parse_region(const std::string& text, const Node& node) {
  size_t used = 0;
  int region = -1;
  try {
    region = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || region < -1) {
    load_error(node.describe() +
               ": metadata 'ortmodule.checkpoint_region' must be an integer >= "
               "-1, got '" +
               text + "'");
  }
  return region;
}

std::unique_ptr<Graph> build_graph(const pb::ModelProto& model, const LoadOptions& options) {
  auto graph = std::make_unique<Graph>();
  graph->opset_version = -1;
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") graph->opset_version = op.version();
  }
  if (graph->opset_version < 0) load_error("the model imports no opset of the ONNX domain");
  const int64_t kMinOpset = 1, kMaxOpset = kMaxOnnxOpset;
  if (graph->opset_version < kMinOpset || graph->opset_version > kMaxOpset) {
    load_error("opset " + std::to_string(graph->opset_version) +
               " is not supported (supported: " + std::to_string(kMinOpset) + " to " +
               std::to_string(kMaxOpset) + "); export with opset_version=17");
  }
  const pb::GraphProto& gp = model.graph();
  graph->name = gp.name();

  std::unordered_set<std::string> feed(options.feed_initializers.begin(),
                                       options.feed_initializers.end());
  std::unordered_set<std::string> initializer_names;
  for (const auto& vi : gp.input()) {
    if (graph->find_value(vi.name())) load_error("graph input '" + vi.name() + "' is duplicated");
    Value* v = graph->new_value(vi.name());
    set_type(v, vi);
    graph->mutable_inputs().push_back(v);
  }
  std::unordered_map<std::string, Value*> fed;
  for (const auto& tp : gp.initializer()) {
    if (tp.name().empty()) load_error("an initializer has no name");
    if (!initializer_names.insert(tp.name()).second)
      load_error("initializer '" + tp.name() + "' is duplicated");
    if (!dtype_is_supported(tp.data_type())) {
      load_error("tensor '" + tp.name() + "' has unsupported ONNX data type " +
                 std::to_string(tp.data_type()));
    }
    check_dims("tensor '" + tp.name() + "'", Shape(tp.dims().begin(), tp.dims().end()),
               static_cast<DType>(tp.data_type()));
    Value* v = graph->find_value(tp.name());
    bool is_fed = feed.count(tp.name()) != 0;
    if (!v) v = graph->new_value(tp.name());
    v->dtype = static_cast<DType>(tp.data_type());
    v->has_shape = true;
    v->shape.clear();
    for (int64_t d : tp.dims()) v->shape.push_back(Dim{d, ""});
    if (is_fed) {
      fed[tp.name()] = v;
    } else {
      // An initializer that is also listed as input is a default the caller may
      // override; we treat it as a constant only when it is not an input.
      bool listed_as_input = false;
      for (Value* in : graph->inputs()) listed_as_input = listed_as_input || in == v;
      Tensor& slot = listed_as_input ? v->input_default : v->initializer;
      slot = tensor_from_proto(tp);
      slot.storage()->writable = false;
    }
  }
  for (const std::string& name : options.feed_initializers) {
    auto it = fed.find(name);
    if (it == fed.end()) {
      load_error("initializer '" + name + "' was requested as a fed input but the model has none");
    }
    graph->mutable_inputs().push_back(it->second);
  }
  for (const auto& vi : gp.value_info()) {
    // Types of intermediates, when the exporter recorded them.
    if (Value* v = graph->find_value(vi.name())) set_type(v, vi);
  }

  std::unordered_map<std::string, Value*> produced;
  int index = 0;
  for (const auto& np : gp.node()) {
    std::string node_name =
        np.name().empty() ? np.op_type() + "_" + std::to_string(index) : np.name();
    ++index;
    std::vector<Value*> inputs;
    for (const std::string& in : np.input()) {
      if (in.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      Value* v = graph->find_value(in);
      if (!v) {
        v = graph->new_value(in);  // produced by a later node, or dangling (checked below)
      }
      inputs.push_back(v);
    }
    if (np.output_size() == 0 || np.output(0).empty()) {
      load_error("node '" + node_name + "' (" + np.op_type() +
                 ") has no first output; every op produces output 0");
    }
    std::vector<Value*> outputs;
    for (const std::string& out : np.output()) {
      if (out.empty()) {
        outputs.push_back(nullptr);
        continue;
      }
      Value* v = graph->find_value(out);
      if (v && (v->producer || v->initializer.defined() || produced.count(out))) {
        load_error("value '" + out + "' is produced twice (second time by node '" + node_name +
                   "')");
      }
      if (!v) v = graph->new_value(out);
      produced[out] = v;
      outputs.push_back(v);
    }
    Node* node = graph->add_node(np.op_type(), np.domain() == "ai.onnx" ? "" : np.domain(), inputs,
                                 outputs, node_name);
    for (const auto& ap : np.attribute())
      node->attrs[ap.name()] = attribute_from_proto(ap, node_name);
    node->source = source_of(np.doc_string());
    for (const auto& prop : np.metadata_props())
      if (prop.key() == "ortmodule.checkpoint_region")
        node->checkpoint_region = parse_region(prop.value(), *node);
  }
  for (Node* n : graph->nodes()) {
    for (Value* in : n->inputs) {
      if (!in || in->producer || in->initializer.defined()) continue;
      bool is_input = false;
      for (Value* gi : graph->inputs()) is_input = is_input || gi == in;
      if (!is_input) {
        load_error("input '" + in->name + "' of " + n->describe() +
                   " is not a graph input, an initializer or the output of any node");
      }
    }
  }
  for (const auto& vi : gp.output()) {
    Value* v = graph->find_value(vi.name());
    if (!v) load_error("graph output '" + vi.name() + "' is not produced by any node");
    set_type(v, vi);
    graph->mutable_outputs().push_back(v);
  }
  // Element types of intermediates the exporter recorded (passes such as the bfloat16
  // lowering read them); shapes stay to be computed at run time.
  for (const auto& vi : gp.value_info()) {
    Value* v = graph->find_value(vi.name());
    if (!v || v->dtype != DType::Undefined || !vi.type().has_tensor_type()) continue;
    const int32_t elem = vi.type().tensor_type().elem_type();
    if (elem != 0 && dtype_is_supported(elem)) v->dtype = static_cast<DType>(elem);
  }
  graph->topological_sort();
  return graph;
}

}  // namespace

std::unique_ptr<Graph> load_onnx_model(const std::string& bytes, const LoadOptions& options) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  pb::ModelProto model;
  if (!model.ParseFromString(bytes)) {
    load_error("the bytes (" + std::to_string(bytes.size()) +
               ") do not parse as an ONNX ModelProto (truncated or not an ONNX file?)");
  }
  if (!model.has_graph()) load_error("the model has no graph");
  return build_graph(model, options);
}

std::unique_ptr<Graph> load_onnx_file(const std::string& path, const LoadOptions& options) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::invalid_argument("cannot open ONNX file '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return load_onnx_model(ss.str(), options);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " (file '" + path + "')");
  }
}

}  // namespace ortmodule
