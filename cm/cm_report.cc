// What the connection manager shows of itself: its ids and what crossed
// the wire (`uroce status`, the engine's report).
#include <sstream>

#include "cm/cm_agent.h"

namespace uroce::cm {

std::string CmAgent::status_text() const {
  const CmWireCounters& w = wire_counters_;
  std::ostringstream os;
  os << "cm: ids " << id_count() << ", events dropped " << events_dropped() << '\n';
  os << "cm wire: mads sent " << w.mads_sent << " received " << w.mads_received << " retransmitted "
     << w.mads_retransmitted << " dropped " << w.mads_dropped << " duplicate " << w.mads_duplicate
     << ", timeouts " << w.timeouts << ", mras sent " << w.mras_sent << " received " << w.mras_received << '\n';
  return os.str();
}

void CmAgent::report(nlohmann::json& out) const {
  const CmWireCounters& w = wire_counters_;
  out = {{"ids", id_count()},
         {"events_dropped", events_dropped()},
         {"mads_sent", w.mads_sent},
         {"mads_received", w.mads_received},
         {"mads_retransmitted", w.mads_retransmitted},
         {"mads_dropped", w.mads_dropped},
         {"mads_duplicate", w.mads_duplicate},
         {"timeouts", w.timeouts},
         {"mras_sent", w.mras_sent},
         {"mras_received", w.mras_received},
         {"listening_ports", listening_ports()}};
}

}  // namespace uroce::cm
