// The agent on a device (see device_link.h).
#include "cm/device_link.h"

namespace uroce::cm {

void attach_to_device(CmAgent& agent, device::Device& dev) {
  CmWire wire;
  wire.send = [&dev](const uint8_t* dgid, uint8_t sgid_index, const mad::Mad& m) {
    dev.qp1_send(dgid, sgid_index, reinterpret_cast<const uint8_t*>(&m));
  };
  wire.has_route = [&dev] { return dev.has_wire(); };
  wire.neighbour_known = [&dev](const uint8_t* dgid, bool solicit) { return dev.qp1_neighbour_known(dgid, solicit); };
  wire.now_ns = [&dev] { return dev.now_ns(); };
  wire.cm_response_timeout = uint8_t(dev.config().cm_response_timeout);
  wire.max_cm_retries = uint8_t(dev.config().cm_max_retries);
  agent.attach_wire(std::move(wire));
  dev.attach_qp1_agent(&agent);
}

}  // namespace uroce::cm
