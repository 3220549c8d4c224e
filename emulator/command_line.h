// uroced's command line (CLI11): what `uroced --help` lists and the
// EngineConfig it gives. Bad flags and values get CLI11's one-line message
// and exit status 2, as `uroce`'s do (tools/command_line.h).
#pragma once

#include <optional>
#include <string>

#include "emulator/engine.h"
#include "net/fault_injector.h"

namespace uroce::emulator {

// Parses argv over `defaults`. Without a config to run (--help, a bad
// command line) it prints what there is to print and sets `exit_status`.
std::optional<EngineConfig> parse_command_line(int argc, const char* const* argv,
                                               const EngineConfig& defaults, int* exit_status);

// "drop=0.05,duplicate=0.01,reorder=0.1,corrupt=0,delay=200,seed=7"
bool parse_fault(const std::string& spec, net::FaultConfig* out, std::string* err);

}  // namespace uroce::emulator
