#include "net/opcode.h"

#include <string>

namespace uroce::net {

std::string opcode_name(uint8_t opcode) {
  const OpcodeInfo& info = opcode_info(opcode);
  if (!info.valid()) return "INVALID_" + std::to_string(opcode);
  return std::string(detail::transport_name(opcode & 0xe0)) + std::string(info.name);
}

}  // namespace uroce::net
