// The checkpoint file format (training/checkpoint.h): round trips, the layout the
// reference writer uses, and clear errors for truncated, corrupted and invalid buffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint_format_generated.h"
#include "training/checkpoint.h"

namespace ortmodule {
namespace {

template <typename T>
Tensor make(DType dtype, const Shape& shape, std::vector<T> values) {
  Tensor t = Tensor::empty(dtype, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  if (t.nbytes()) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor nominal(DType dtype, const Shape& shape) {
  return Tensor(std::make_shared<Storage>(), dtype, shape);
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& name) {
  EXPECT_EQ(a.dtype(), b.dtype()) << name;
  EXPECT_EQ(a.shape(), b.shape()) << name;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << name;
  if (a.nbytes()) {
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << name;
  }
}

void expect_same_tensors(const std::map<std::string, Tensor>& a,
                         const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    expect_same_tensor(t, b.at(name), name);
  }
}

CheckpointData sample() {
  CheckpointData c;
  c.trainable["weight"] = make<float>(DType::Float32, {2, 3}, {0.5f, -1, 2, 3, 4, 5.25f});
  c.trainable["bias"] = make<double>(DType::Float64, {}, {-2.5});
  c.trainable["empty"] = make<float>(DType::Float32, {0, 3}, {});
  c.trainable["half"] = make<uint16_t>(DType::Float16, {2}, {0x3c00, 0xc000});
  c.frozen["counts"] = make<int64_t>(DType::Int64, {3}, {1, -2, INT64_MAX});
  c.frozen["mask"] = make<uint8_t>(DType::Bool, {2, 2}, {1, 0, 0, 1});
  c.frozen["nibbles"] = make<uint8_t>(DType::Int4, {5}, {1, 15, 7, 8, 3});  // packed on disk
  OptimizerGroupState g;
  g.step = 7;
  g.initial_learning_rate = 0.01f;
  for (const char* p : {"weight", "bias"}) {
    const Tensor& param = c.trainable[p];
    std::vector<float> m0(param.numel(), 0.125f), m1(param.numel(), 0.5f);
    const DType dt = param.dtype();
    if (dt == DType::Float32) {
      g.param_states[p]["momentum0"] = make<float>(dt, param.shape(), m0);
      g.param_states[p]["momentum1"] = make<float>(dt, param.shape(), m1);
    } else {
      g.param_states[p]["momentum0"] = make<double>(dt, param.shape(), {0.25});
      g.param_states[p]["momentum1"] = make<double>(dt, param.shape(), {0.75});
    }
  }
  c.optimizer_groups["group0"] = g;
  c.properties["epoch"] = int64_t{-3};
  c.properties["big"] = int64_t{INT64_MIN};
  c.properties["loss"] = 0.25f;
  c.properties["note"] = std::string("hello \0 world", 13);
  return c;
}

CheckpointData round_trip(const CheckpointData& c, bool include_optimizer_state) {
  const std::string bytes = serialize_checkpoint(c, include_optimizer_state);
  return parse_checkpoint(bytes.data(), bytes.size(), "<round trip>");
}

TEST(Checkpoint, RoundTripWithOptimizerState) {
  const CheckpointData c = sample();
  const CheckpointData r = round_trip(c, true);
  expect_same_tensors(c.trainable, r.trainable);
  expect_same_tensors(c.frozen, r.frozen);
  EXPECT_FALSE(r.is_nominal);
  ASSERT_EQ(r.optimizer_groups.size(), 1u);
  const OptimizerGroupState& g = r.optimizer_groups.at("group0");
  EXPECT_EQ(g.step, 7);
  EXPECT_EQ(g.initial_learning_rate, 0.01f);
  ASSERT_EQ(g.param_states.size(), 2u);
  for (const auto& [p, moments] : c.optimizer_groups.at("group0").param_states) {
    expect_same_tensors(moments, g.param_states.at(p));
  }
  EXPECT_EQ(r.properties, c.properties);
}

TEST(Checkpoint, RoundTripWithoutOptimizerState) {
  const CheckpointData c = sample();
  const CheckpointData r = round_trip(c, false);
  expect_same_tensors(c.trainable, r.trainable);
  expect_same_tensors(c.frozen, r.frozen);
  EXPECT_TRUE(r.optimizer_groups.empty());
  EXPECT_EQ(r.properties, c.properties);
}

TEST(Checkpoint, EachPropertyType) {
  for (const PropertyValue& v :
       {PropertyValue(int64_t{42}), PropertyValue(-1.5f), PropertyValue(std::string("s"))}) {
    CheckpointData c;
    c.properties["p"] = v;
    const CheckpointData r = round_trip(c, false);
    ASSERT_EQ(r.properties.size(), 1u);
    EXPECT_EQ(r.properties.at("p").index(), v.index());
    EXPECT_EQ(r.properties.at("p"), v);
  }
}

TEST(Checkpoint, EmptyState) {
  const CheckpointData r = round_trip(CheckpointData{}, true);
  EXPECT_TRUE(r.trainable.empty() && r.frozen.empty() && r.optimizer_groups.empty() &&
              r.properties.empty());
  EXPECT_FALSE(r.is_nominal);
}

TEST(Checkpoint, Nominal) {
  CheckpointData c;
  c.is_nominal = true;
  c.trainable["w"] = nominal(DType::Float32, {4, 5});
  c.frozen["s"] = nominal(DType::BFloat16, {});
  // A full tensor in a nominal state is written without its data.
  c.frozen["full"] = make<int32_t>(DType::Int32, {2}, {1, 2});
  const std::string bytes = serialize_checkpoint(c, false);
  EXPECT_LT(bytes.size(), 400u);
  const CheckpointData r = parse_checkpoint(bytes.data(), bytes.size(), "nominal");
  EXPECT_TRUE(r.is_nominal);
  ASSERT_EQ(r.trainable.size(), 1u);
  ASSERT_EQ(r.frozen.size(), 2u);
  EXPECT_EQ(r.trainable.at("w").dtype(), DType::Float32);
  EXPECT_EQ(r.trainable.at("w").shape(), Shape({4, 5}));
  EXPECT_EQ(r.frozen.at("s").dtype(), DType::BFloat16);
  EXPECT_EQ(r.frozen.at("full").shape(), Shape({2}));
  for (const auto* m : {&r.trainable, &r.frozen}) {
    for (const auto& [name, t] : *m) {
      ASSERT_TRUE(t.defined()) << name;
      EXPECT_EQ(t.raw(), nullptr) << name;
      EXPECT_EQ(t.storage()->bytes, 0u) << name;
    }
  }
}

std::vector<std::string> names(const flatbuffers::Vector<flatbuffers::Offset<fbs::Tensor>>* v) {
  std::vector<std::string> out;
  for (const auto* t : *v) out.push_back(t->name()->str());
  return out;
}

TEST(Checkpoint, WrittenSortedAndAsTheReferenceWrites) {
  CheckpointData c;
  for (const char* n : {"zeta", "alpha", "mid"})
    c.trainable[n] = make<float>(DType::Float32, {1}, {1});
  for (const char* n : {"b", "a"}) c.frozen[n] = make<float>(DType::Float32, {1}, {1});
  for (const char* n : {"z", "y", "x"}) c.properties[n] = int64_t{1};
  c.properties["m"] = 1.f;
  c.properties["k"] = std::string("v");
  c.optimizer_groups["group0"].param_states["zeta"]["momentum1"] =
      make<float>(DType::Float32, {1}, {1});
  c.optimizer_groups["group0"].param_states["zeta"]["momentum0"] =
      make<float>(DType::Float32, {1}, {1});
  c.optimizer_groups["group0"].param_states["alpha"]["momentum0"] =
      make<float>(DType::Float32, {1}, {1});
  const std::string bytes = serialize_checkpoint(c, true);
  ASSERT_TRUE(fbs::CheckpointBufferHasIdentifier(bytes.data()));
  const fbs::Checkpoint* root = fbs::GetCheckpoint(bytes.data());
  EXPECT_EQ(root->version(), 2);
  EXPECT_EQ(names(root->module_state()->requires_grad_params()),
            (std::vector<std::string>{"alpha", "mid", "zeta"}));
  EXPECT_EQ(names(root->module_state()->frozen_params()), (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(root->module_state()->is_nominal_state());
  const auto* states = root->optimizer_groups()->Get(0)->optimizer_states();
  ASSERT_EQ(states->size(), 2u);
  EXPECT_EQ(states->Get(0)->param_name()->str(), "alpha");
  EXPECT_EQ(names(states->Get(1)->momentums()),
            (std::vector<std::string>{"momentum0", "momentum1"}));
  const fbs::PropertyBag* bag = root->property_bag();
  std::vector<std::string> ints;
  for (const auto* p : *bag->ints()) ints.push_back(p->name()->str());
  EXPECT_EQ(ints, (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(bag->floats()->size(), 1u);
  EXPECT_EQ(bag->strings()->size(), 1u);

  // The reference's own runtime writer: the optimizer group list is always there (empty
  // without optimizer state), the module state and property bag only when not empty.
  const std::string empty = serialize_checkpoint(CheckpointData{}, false);
  const fbs::Checkpoint* e = fbs::GetCheckpoint(empty.data());
  EXPECT_EQ(e->module_state(), nullptr);
  ASSERT_NE(e->optimizer_groups(), nullptr);
  EXPECT_EQ(e->optimizer_groups()->size(), 0u);
  EXPECT_EQ(e->property_bag(), nullptr);
}

// ---- invalid buffers ----

void expect_error(const std::string& bytes, const std::string& needle, const std::string& origin) {
  try {
    parse_checkpoint(bytes.data(), bytes.size(), origin);
    FAIL() << "no error, expected one containing: " << needle;
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(origin), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(Checkpoint, TruncatedBuffers) {
  const std::string bytes = serialize_checkpoint(sample(), true);
  expect_error("", "truncated: 0 bytes", "empty.ckpt");
  expect_error(bytes.substr(0, 7), "truncated: 7 bytes", "short.ckpt");
  // Trailing alignment padding (at most 3 bytes here) may go unnoticed; anything shorter
  // loses data that the verifier finds missing.
  for (size_t n = 8; n + 3 < bytes.size(); ++n) {
    expect_error(bytes.substr(0, n), "truncated", "cut.ckpt");
  }
}

TEST(Checkpoint, BadIdentifier) {
  std::string bytes = serialize_checkpoint(sample(), false);
  bytes.replace(4, 4, "ORTM");
  expect_error(bytes, "file identifier is 'ORTM', expected 'ODTC'", "model.ort");
  bytes.replace(4, 4, std::string("\x01\x02xy", 4));
  expect_error(bytes, "file identifier is '\\x01\\x02xy'", "junk");
}

TEST(Checkpoint, CorruptedBytesNeverCrash) {
  const std::string bytes = serialize_checkpoint(sample(), true);
  int rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      try {
        const CheckpointData c = parse_checkpoint(bad.data(), bad.size(), "flipped");
        // Whatever was accepted is a consistent state that writes and reads back.
        round_trip(c, true);
      } catch (const std::runtime_error& e) {
        ++rejected;
        EXPECT_EQ(std::string(e.what()).rfind("flipped: invalid checkpoint: ", 0), 0u) << e.what();
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(Checkpoint, UnalignedBufferIsCopied) {
  const std::string bytes = serialize_checkpoint(sample(), true);
  std::vector<char> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  const CheckpointData r = parse_checkpoint(shifted.data() + 1, bytes.size(), "shifted");
  expect_same_tensors(sample().trainable, r.trainable);
}

// Builds a checkpoint by hand, so that the invalid cases the writer never produces can be
// checked. `tensor` customizes the one trainable tensor (dims {2}, float32, 8 bytes).
struct Crafted {
  std::vector<int64_t> dims{2};
  int32_t data_type = 1;
  size_t raw_bytes = 8;
  int64_t external_data_offset = -1;
  std::vector<std::string> string_data;
  std::string trainable_name = "w";
  std::string frozen_name = "f";
  bool with_frozen_list = true;
  bool nominal = false;
  bool external = false;
  int32_t version = 2;
  std::vector<std::string> int_property_names;
  bool group = false;
  std::vector<std::string> group_params;

  std::string build() const {
    flatbuffers::FlatBufferBuilder b;
    const std::vector<uint8_t> raw(raw_bytes, 0);
    auto tensor = [&](const std::string& name) {
      std::vector<flatbuffers::Offset<flatbuffers::String>> strings;
      for (const auto& x : string_data) strings.push_back(b.CreateString(x));
      return fbs::CreateTensorDirect(
          b, name.c_str(), nullptr, &dims, static_cast<fbs::TensorDataType>(data_type), &raw,
          string_data.empty() ? nullptr : &strings, external_data_offset);
    };
    std::vector<flatbuffers::Offset<fbs::Tensor>> trainable{tensor(trainable_name)};
    std::vector<flatbuffers::Offset<fbs::Tensor>> frozen{fbs::CreateTensorDirect(
        b, frozen_name.c_str(), nullptr, &dims, fbs::TensorDataType_FLOAT, &raw)};
    const auto module_state = fbs::CreateModuleStateDirect(
        b, &trainable, with_frozen_list ? &frozen : nullptr, nominal, external);
    std::vector<flatbuffers::Offset<fbs::OptimizerGroup>> groups;
    if (group) {
      std::vector<flatbuffers::Offset<fbs::ParameterOptimizerState>> states;
      for (const auto& p : group_params) {
        std::vector<flatbuffers::Offset<fbs::Tensor>> m{fbs::CreateTensorDirect(
            b, "momentum0", nullptr, &dims, fbs::TensorDataType_FLOAT, &raw)};
        states.push_back(fbs::CreateParameterOptimizerStateDirect(b, p.c_str(), &m));
      }
      groups.push_back(fbs::CreateOptimizerGroupDirect(b, "group0", 3, 0.5f, &states));
    }
    std::vector<flatbuffers::Offset<fbs::IntProperty>> ints;
    for (const auto& n : int_property_names)
      ints.push_back(fbs::CreateIntPropertyDirect(b, n.c_str(), 1));
    const auto bag = fbs::CreatePropertyBagDirect(b, &ints);
    fbs::FinishCheckpointBuffer(
        b, fbs::CreateCheckpointDirect(b, version, module_state, &groups, bag));
    return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  }
};

TEST(Checkpoint, CraftedValidBufferParses) {
  Crafted k;
  k.int_property_names = {"b", "a"};  // unsorted lists are read too
  k.group = true;
  k.group_params = {"w"};
  const std::string bytes = k.build();
  const CheckpointData c = parse_checkpoint(bytes.data(), bytes.size(), "crafted");
  EXPECT_EQ(c.trainable.at("w").shape(), Shape({2}));
  EXPECT_EQ(c.optimizer_groups.at("group0").step, 3);
  EXPECT_EQ(c.properties.size(), 2u);
}

TEST(Checkpoint, InvalidFieldsAreNamed) {
  auto check = [](const std::function<void(Crafted&)>& edit, const std::string& needle) {
    Crafted k;
    edit(k);
    expect_error(k.build(), needle, "crafted.ckpt");
  };
  check(
      [](Crafted& k) { k.raw_bytes = 7; },
      "requires_grad_params[0] ('w') has 7 bytes of raw_data, expected 8 for dims [2] of float32");
  check([](Crafted& k) { k.dims = {3, 1000000}; }, "has 8 bytes of raw_data, expected 12000000");
  check([](Crafted& k) { k.dims = {2, -1}; }, "has dimension -1 at position 1");
  check([](Crafted& k) { k.dims = {INT64_MAX, 4}; }, "overflows or exceeds the allocation limit");
  check([](Crafted& k) { k.data_type = 8; }, "unsupported data type 8 (string)");
  check([](Crafted& k) { k.data_type = 99; }, "unsupported data type 99");
  check([](Crafted& k) { k.data_type = 0; }, "unsupported data type 0");
  check([](Crafted& k) { k.string_data = {"a", "b"}; }, "string tensors are not supported");
  check([](Crafted& k) { k.external_data_offset = 0; }, "external data is not supported");
  check([](Crafted& k) { k.external = true; }, "module_state has external data");
  check([](Crafted& k) { k.trainable_name = "f"; }, "parameter 'f' appears more than once");
  check([](Crafted& k) { k.trainable_name = ""; }, "requires_grad_params[0] has an empty name");
  check([](Crafted& k) { k.with_frozen_list = false; }, "module_state has no frozen_params list");
  check([](Crafted& k) { k.version = 3; }, "version 3 is not supported");
  check([](Crafted& k) { k.version = 0; }, "version 0 is not supported");
  check(
      [](Crafted& k) {
        k.int_property_names = {"p", "p"};
      },
      "property 'p' appears more than once");
  check([](Crafted& k) { k.int_property_names = {""}; }, "property_bag.ints[0] has an empty name");
  check(
      [](Crafted& k) {
        k.group = true;
        k.group_params = {"w", "w"};
      },
      "optimizer group 'group0' state of parameter 'w' appears more than once");
  check(
      [](Crafted& k) {
        k.nominal = true;
        k.raw_bytes = 3;
      },
      "of a nominal checkpoint has 3 bytes of raw_data, expected 0 or 8");
}

TEST(Checkpoint, NominalAcceptsPlaceholderData) {
  // A nominal state re-saved by the reference runtime carries placeholder bytes.
  Crafted k;
  k.nominal = true;
  const std::string bytes = k.build();
  const CheckpointData c = parse_checkpoint(bytes.data(), bytes.size(), "crafted");
  EXPECT_TRUE(c.is_nominal);
  EXPECT_EQ(c.trainable.at("w").raw(), nullptr);
}

TEST(Checkpoint, SerializeRejectsInconsistentStates) {
  CheckpointData both;
  both.trainable["x"] = make<float>(DType::Float32, {1}, {1});
  both.frozen["x"] = make<float>(DType::Float32, {1}, {1});
  EXPECT_THROW(serialize_checkpoint(both, false), std::runtime_error);
  CheckpointData no_data;
  no_data.trainable["x"] = nominal(DType::Float32, {3});
  try {
    serialize_checkpoint(no_data, false);
    FAIL() << "a tensor without data was written";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("trainable parameter 'x' of shape [3] holds no data"),
              std::string::npos)
        << e.what();
  }
  CheckpointData undefined_dtype;
  undefined_dtype.frozen["u"] = Tensor();
  EXPECT_THROW(serialize_checkpoint(undefined_dtype, false), std::runtime_error);
}

TEST(Checkpoint, Files) {
  const std::string path = ::testing::TempDir() + "/ortmodule_checkpoint_test.ckpt";
  const CheckpointData c = sample();
  save_checkpoint_file(c, path, true);
  const CheckpointData r = load_checkpoint_file(path);
  expect_same_tensors(c.trainable, r.trainable);
  EXPECT_EQ(r.optimizer_groups.at("group0").step, 7);
  std::remove(path.c_str());
  try {
    load_checkpoint_file(path);
    FAIL() << "a missing file loaded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open checkpoint file '" + path + "'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(save_checkpoint_file(c, "/nonexistent-dir/x.ckpt", false), std::runtime_error);
}

}  // namespace
}  // namespace ortmodule
