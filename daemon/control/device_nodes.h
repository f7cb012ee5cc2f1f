// The /dev/infiniband/ nodes that let verbs consumers which look for a device's node before
// using it (UCX: /dev/infiniband/<ibv_device.dev_name> must be a character device the user
// can read and write) see snic's devices. libsnic reports dev_name "snic-<device>"
// (shm::kDeviceNodePrefix); snicd makes one node per device at start and removes it at stop.
// A node is a character device with /dev/null's numbers: nothing uses it, and opening it is
// harmless. Nodes that are not of that kind are never replaced nor removed.
#pragma once

#include <sys/types.h>

#include <span>
#include <string>
#include <vector>

namespace snic::daemon {

class DeviceNodes {
  public:
    DeviceNodes() = default;
    // Makes DIR/snic-<name> for each name (DIR too, 0755, if missing), owned by snicd's uid
    // and gid with `mode` (the control socket's). A node already there of snic's kind is
    // kept (its mode and owner set again); any other file is left alone and logged.
    DeviceNodes(std::string dir, std::span<const std::string> names, mode_t mode);
    DeviceNodes(DeviceNodes&& o) noexcept : made_(std::move(o.made_)) {}
    DeviceNodes& operator=(DeviceNodes&&) = delete;
    ~DeviceNodes();  // removes the nodes it made or kept, if still of snic's kind

    const std::vector<std::string>& paths() const { return made_; }

  private:
    std::vector<std::string> made_;
};

// Whether `path` is a node of snic's kind (a character device with /dev/null's numbers).
bool is_snic_node(const std::string& path);

}  // namespace snic::daemon
