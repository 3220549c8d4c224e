// The agent on a device: its wire is the device's QP1 (MADs out, the
// neighbour cache, the clock, the CM timeouts of the device's
// configuration), and the device hands it QP1's MADs (device/qp1_agent.h).
// What the engine does at start, and the tests that run the two together.
#pragma once

#include "cm/cm_agent.h"
#include "device/device.h"

namespace uroce::cm {

void attach_to_device(CmAgent& agent, device::Device& dev);

}  // namespace uroce::cm
