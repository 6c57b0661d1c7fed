// torch.profiler integration: the engine's op events (base/profiler.h) as at::RecordFunction
// events, "ortmodule::<op type> (<node name>)", so a trace shows every engine op inside the
// step. While no profiler listens, an executor run costs one at::hasCallbacks() check.
#include <ATen/record_function.h>

#include <memory>
#include <string>

#include "base/profiler.h"
#include "python/torch_boundary.h"

namespace ortmodule {

namespace {

bool listening() { return at::hasCallbacks(); }

void* begin_op_event(const std::string& op_type, const std::string& node_name) {
  auto event = std::make_unique<at::RecordFunction>(at::RecordScope::FUNCTION);
  if (!event->isActive()) return nullptr;
  std::string name = "ortmodule::" + op_type;
  if (!node_name.empty()) name += " (" + node_name + ")";
  event->before(std::string_view(name), c10::ArrayRef<const c10::IValue>{});
  return event.release();
}

void end_op_event(void* event) { delete static_cast<at::RecordFunction*>(event); }

const OpEventHooks kOpEventHooks{listening, begin_op_event, end_op_event};

}  // namespace

void set_op_events(bool enabled) { set_op_event_hooks(enabled ? &kOpEventHooks : nullptr); }

bool op_events_enabled() { return installed_op_event_hooks().load() != nullptr; }

}  // namespace ortmodule
