#include "onnx/saver.h"

#include <cstdint>
#include <set>

#include "onnx/packed_bits.h"
#include "ortmodule_onnx.pb.h"

namespace ortmodule {

namespace pb = ::ortmodule_onnx;

namespace {

void fill_tensor(const Tensor& t, const std::string& name, pb::TensorProto* tp) {
  tp->set_name(name);
  tp->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) tp->add_dims(d);
  const int bits = dtype_packed_bits(t.dtype());
  if (bits < 8) {
    tp->set_raw_data(pack_bits(static_cast<const uint8_t*>(t.raw()), t.numel(), bits));
    return;
  }
  tp->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

void fill_value_info(const Value* v, pb::ValueInfoProto* vi, const Value* like = nullptr) {
  vi->set_name(v->name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  const DType dtype = v->dtype != DType::Undefined || !like ? v->dtype : like->dtype;
  if (dtype != DType::Undefined) tt->set_elem_type(static_cast<int32_t>(dtype));
  const Value* shaped = v->has_shape || !like ? v : like;
  if (!shaped->has_shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : shaped->shape) {
    auto* dim = shape->add_dim();
    if (d.value >= 0)
      dim->set_dim_value(d.value);
    else if (!d.param.empty())
      dim->set_dim_param(d.param);
  }
}

void fill_attribute(const std::string& name, const Attribute& a, pb::AttributeProto* ap) {
  ap->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::Int:
      ap->set_type(pb::AttributeProto::INT);
      ap->set_i(a.i);
      break;
    case Attribute::Kind::Float:
      ap->set_type(pb::AttributeProto::FLOAT);
      ap->set_f(static_cast<float>(a.f));
      break;
    case Attribute::Kind::String:
      ap->set_type(pb::AttributeProto::STRING);
      ap->set_s(a.s);
      break;
    case Attribute::Kind::Ints:
      ap->set_type(pb::AttributeProto::INTS);
      for (int64_t v : a.ints) ap->add_ints(v);
      break;
    case Attribute::Kind::Floats:
      ap->set_type(pb::AttributeProto::FLOATS);
      for (double v : a.floats) ap->add_floats(static_cast<float>(v));
      break;
    case Attribute::Kind::Strings:
      ap->set_type(pb::AttributeProto::STRINGS);
      for (const auto& s : a.strings) ap->add_strings(s);
      break;
    case Attribute::Kind::Tensor:
      ap->set_type(pb::AttributeProto::TENSOR);
      fill_tensor(a.t, "", ap->mutable_t());
      break;
  }
}

}  // namespace

std::string save_onnx_model(const Graph& graph, const std::vector<Value*>& extra_inputs,
                            const std::vector<Value*>& extra_outputs,
                            const std::vector<const Value*>& extra_input_like,
                            const std::vector<const Value*>& extra_output_like) {
  auto like = [](const std::vector<const Value*>& list, size_t i) {
    return i < list.size() ? list[i] : nullptr;
  };
  pb::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("ortmodule");
  std::set<std::string> domains;
  pb::GraphProto* gp = model.mutable_graph();
  gp->set_name(graph.name.empty() ? "ortmodule_graph" : graph.name);
  for (const Value* v : graph.inputs()) fill_value_info(v, gp->add_input());
  for (size_t i = 0; i < extra_inputs.size(); ++i)
    if (extra_inputs[i])
      fill_value_info(extra_inputs[i], gp->add_input(), like(extra_input_like, i));
  for (const Value* v : graph.outputs()) fill_value_info(v, gp->add_output());
  for (size_t i = 0; i < extra_outputs.size(); ++i)
    if (extra_outputs[i])
      fill_value_info(extra_outputs[i], gp->add_output(), like(extra_output_like, i));
  std::set<const Value*> written;
  std::set<std::string> node_names;  // ONNX requires distinct node names
  for (const Node* n : graph.nodes()) {
    pb::NodeProto* np = gp->add_node();
    std::string name = n->name;
    for (int k = 1; !node_names.insert(name).second; ++k) name = n->name + "_" + std::to_string(k);
    np->set_name(name);
    np->set_op_type(n->op_type);
    if (!n->domain.empty()) {
      np->set_domain(n->domain);
      domains.insert(n->domain);
    }
    for (const Value* in : n->inputs) {
      np->add_input(in ? in->name : "");
      if (in && in->initializer.defined() && written.insert(in).second)
        fill_tensor(in->initializer, in->name, gp->add_initializer());
    }
    for (const Value* out : n->outputs) np->add_output(out ? out->name : "");
    for (const auto& kv : n->attrs) fill_attribute(kv.first, kv.second, np->add_attribute());
  }
  auto* onnx_opset = model.add_opset_import();
  onnx_opset->set_domain("");
  onnx_opset->set_version(graph.opset_version);
  for (const std::string& d : domains) {
    auto* op = model.add_opset_import();
    op->set_domain(d);
    op->set_version(1);
  }
  return model.SerializeAsString();
}

}  // namespace ortmodule
