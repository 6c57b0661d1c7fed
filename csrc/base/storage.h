// A block of memory a tensor's elements live in: reference counted, so that views share
// it and it returns to the allocator (base/allocator.h) or to its owner (a torch tensor:
// the deleter drops that owner) when its last user releases it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "base/device.h"

namespace ortmodule {

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  std::function<void(void*)> deleter;  // empty: not owned
  // False for memory the engine does not own (parameters, user inputs, constants):
  // never overwritten by in-place kernels.
  bool writable = true;
  // True for contents that never change while the storage lives (graph constants, values
  // of the shape cache): a device may keep a copy of them (ops/dispatch.h, DeviceCopies).
  bool immutable = false;
  // Opaque state carried by a value instead of data (a bridge node's record of its
  // forward run for backward); dropped with the storage.
  std::shared_ptr<void> handle;
  Device device;  // where `data` lives (kernels of that device read and write it)
  Storage() = default;
  Storage(void* d, size_t b, std::function<void(void*)> del)
      : data(d), bytes(b), deleter(std::move(del)) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (deleter) deleter(data);
  }
};

}  // namespace ortmodule
