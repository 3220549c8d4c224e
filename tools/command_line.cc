// The uroce command line, parsed with CLI11 (command_line.h). Every
// subcommand is declared here with its options; the option descriptions are
// what `uroce SUBCOMMAND --help` prints, and tools/completion/uroce.bash
// completes the same names (ctest tool_cli checks that they agree).
#include "tools/command_line.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <iostream>

namespace uroce::tool {
namespace {

constexpr const char* kUsage = R"USAGE(usage: uroce [--runtime-dir DIR] COMMAND [ARGS]

Commands:
  start [--name NAME] [--ip A.B.C.D] [--mac MAC] [--port SPEC] [--netdev IF]
        [--users LIST] [--group NAME] [--wait SECONDS] [FLAGS...]
                      start engine NAME (uroced) in the background; other
                      flags are passed on to uroced. It serves its owner and
                      root only, unless --users (names, uids or 'all') or
                      --group admit others
  stop [--name NAME | --all]
                      stop engine NAME, or every engine
  status [--json]     show every engine in the runtime directory
  stats [--name NAME] [--json | --watch [--interval S] [--count N]]
                      the counters of one engine, or of every engine;
                      --watch: live rates (packets, bytes, retransmissions,
                      NAKs, drops per second, the busiest QPs) every S seconds
                      (default 1); --json: status and counters as JSON
  run [--all-cpus] [--without-engine] [--wait-listen PORT] [--] CMD [ARGS...]
                      run CMD with uroce's libibverbs.so.1 (LD_LIBRARY_PATH);
                      its threads that poll CQs leave the engine's CPU
                      (--all-cpus: they do not). Refused when no engine runs
                      (--without-engine: run anyway); --wait-listen: first
                      wait until something listens on TCP or rdma_cm PORT (a
                      client started right after its server)
  env                 print the exports that 'run' sets, for eval "$(uroce env)"
  fault [--name NAME] [--port loopback|wire]
        [off | drop=P duplicate=P reorder=P corrupt=P delay=US seed=N]
                      show each port's fault injection (no setting), set it on
                      a port, or turn it off ('off')
  capture [--name NAME] -w FILE.pcap [--count N] [--seconds S]
                      write the frames crossing the engine's ports (loopback
                      included) to FILE until N frames, S seconds or Ctrl-C
  port [--name NAME] up|down
                      take the engine's port down or up: clients get
                      IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE, traffic stops
  bench [--quick] [--out DIR] [--no-two-hosts] [--keep] [--only PARTS]
        [--load N] [--against BUILD [--runs N] [--tolerance F]]
                      run perftest through engines of its own beside the
                      baselines (memcpy, shared memory, TCP); table, JSON, SVG;
                      with --against, an A/B of this build and BUILD
  help [COMMAND]      show this text, or the options of COMMAND

'uroce COMMAND --help' shows the options of COMMAND.
NAME defaults to uroce0; applications see the engine as the device NAME.
The runtime directory holds NAME.sock, NAME.pid and NAME.log. It is DIR, else
$UROCE_RUNTIME_DIR, else /run/uroce for root, $XDG_RUNTIME_DIR/uroce or
/tmp/uroce-UID. $UROCE_PROVIDER_DIR overrides where 'run' finds the provider.
Exit status: 0 done, 1 failed, 2 bad command line, 3 no engine running
('run': 126/127 CMD not executable/not found, else CMD's own).
)USAGE";

constexpr const char* kNameHelp = "the engine (default uroce0)";

// One fault setting: its key(s) and where its value goes.
struct FaultSetting {
  const char* key;
  const char* alias;
  void (*apply)(abi::SetFaultRequest&, double);
};

constexpr FaultSetting kFaultSettings[] = {
    {"drop", nullptr, [](abi::SetFaultRequest& r, double v) { r.drop = v; }},
    {"duplicate", "dup", [](abi::SetFaultRequest& r, double v) { r.duplicate = v; }},
    {"reorder", nullptr, [](abi::SetFaultRequest& r, double v) { r.reorder = v; }},
    {"corrupt", nullptr, [](abi::SetFaultRequest& r, double v) { r.corrupt = v; }},
    {"delay", nullptr, [](abi::SetFaultRequest& r, double v) { r.delay_us = uint64_t(v); }},
    {"seed", nullptr, [](abi::SetFaultRequest& r, double v) { r.seed = uint64_t(v); }},
};

// Applies KEY=VALUE to `req`; empty on success, else what is wrong with it.
std::string apply_fault_setting(const std::string& kv, abi::SetFaultRequest* req) {
  const size_t eq = kv.find('=');
  if (eq == std::string::npos) return "'" + kv + "' is not key=value";
  const std::string key = kv.substr(0, eq);
  char* rest = nullptr;
  const double v = std::strtod(kv.c_str() + eq + 1, &rest);
  if (*rest || eq + 1 == kv.size()) return "bad value in '" + kv + "'";
  for (const FaultSetting& s : kFaultSettings) {
    if (key == s.key || (s.alias && key == s.alias)) {
      s.apply(*req, v);
      return {};
    }
  }
  return "unknown setting '" + key + "'";
}

void declare_start(CLI::App& app, CommandLine& cl, std::vector<std::string>& passed_on) {
  CLI::App* sub = app.add_subcommand("start", "start engine NAME (uroced) in the background");
  sub->add_option("--name", cl.start.name, kNameHelp)->type_name("NAME");
  sub->add_option("--ip", cl.start.ip, "its IPv4 address (uroced --ip)")->type_name("A.B.C.D");
  sub->add_option("--mac", "its MAC address (uroced --mac)")->type_name("MAC");
  sub->add_option("--port", "a DPDK port for the wire (uroced --port)")->type_name("SPEC");
  sub->add_option("--netdev",
                  "bind the device to kernel interface IF: the wire on it, its MAC and addresses "
                  "as the GIDs (uroced --netdev)")
      ->type_name("IF");
  sub->add_option("--users",
                  "other users who may use the engine: names or uids, comma-separated, or 'all' "
                  "(uroced --users; default: its owner and root only)")
      ->type_name("LIST");
  sub->add_option("--group", "a group whose members may use the engine (uroced --group)")
      ->type_name("NAME");
  sub->add_option("--wait", cl.start.wait_seconds,
                  "how long to wait for the engine to answer before stopping it (default " +
                      std::to_string(kStartTimeoutSec) + "; a slow or emulated machine may need more)")
      ->type_name("SECONDS")
      ->check(CLI::Range(1, 3600));
  // Every other flag goes to uroced as it is, in order (allow_extras keeps
  // them in `remaining`). The positional below takes nothing (its check
  // refuses every word); it exists so that `--` stays start's: without one,
  // CLI11 hands what follows `--` back to the top level.
  sub->allow_extras();
  sub->validate_positionals();
  sub->add_option("FLAGS", passed_on,
                  "any other uroced flag (--cpu, --fault, --mtu, ...: uroced --help), passed on; "
                  "after --, every argument")
      ->check(CLI::Validator([](std::string&) { return std::string("passed on"); }, "", ""));
}

void declare_stop(CLI::App& app, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand("stop", "stop engine NAME, or every engine");
  auto* name = sub->add_option("--name", cl.stop.name, kNameHelp)->type_name("NAME");
  sub->add_flag("--all", cl.stop.all, "stop every engine of the runtime directory")->excludes(name);
}

void declare_show(CLI::App& app, CommandLine& cl) {
  CLI::App* status = app.add_subcommand("status", "show every engine in the runtime directory");
  status->add_flag("--json", cl.show.json, "status and counters as one JSON document");

  CLI::App* stats = app.add_subcommand("stats", "the counters of one engine, or of every engine");
  stats->add_option("--name", cl.show.names, "an engine (repeatable; default: every engine)")
      ->type_name("NAME")
      ->allow_extra_args(false);  // one NAME per --name
  auto* json = stats->add_flag("--json", cl.show.json, "status and counters as one JSON document");
  auto* watch = stats->add_flag("--watch", cl.show.watch,
                                "live rates (packets, bytes, retransmissions, NAKs, drops per "
                                "second, the busiest QPs)");
  watch->excludes(json);
  stats->add_option("--interval", cl.show.interval_s, "--watch: seconds between refreshes (default 1)")
      ->type_name("S")
      ->check(CLI::Range(0.1, 3600.0))
      ->needs(watch);
  stats->add_option("--count", cl.show.count, "--watch: stop after N refreshes (default: Ctrl-C)")
      ->type_name("N")
      ->needs(watch);
}

void declare_run(CLI::App& app, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand(
      "run", "run CMD with uroce's libibverbs.so.1 (LD_LIBRARY_PATH); its threads that poll CQs "
             "leave the engine's CPU");
  sub->add_flag("--all-cpus", cl.run.all_cpus, "leave the polling threads on every CPU");
  sub->add_flag("--without-engine", cl.run.without_engine,
                "run CMD even when no engine runs (it then finds no device)");
  sub->add_option("--wait-listen", cl.run.wait_listen,
                  "first wait (up to 30 s) until a program of this network namespace listens on TCP "
                  "PORT, or an rdma_cm id of an engine on PORT: a client started right after its "
                  "server (perftest, the ping-pongs, rping)")
      ->type_name("PORT")
      ->check(CLI::Range(1, 65535));
  // Everything from CMD on is CMD's, its own flags (-g 0, --help) included.
  sub->positionals_at_end();
  sub->add_option("CMD", cl.run.command, "the command and its arguments, passed on untouched")
      ->required()
      ->allow_extra_args();
}

void declare_env(CLI::App& app) {
  app.add_subcommand("env", "print the exports that 'run' sets, for eval \"$(uroce env)\"");
}

void declare_fault(CLI::App& app, CommandLine& cl, std::vector<std::string>& settings) {
  CLI::App* sub =
      app.add_subcommand("fault", "show the fault injection of the engine's ports (no setting), set it on a "
                                  "port (KEY=VALUE...), or turn it off ('off')");
  sub->add_option("--name", cl.fault.name, kNameHelp)->type_name("NAME");
  sub->add_option("--port", "the loopback port or the wire (default: the wire if any)")
      ->type_name("PORT")
      ->check(CLI::IsMember({"loopback", "wire"}));
  sub->add_option("SETTINGS", settings,
                  "drop=P duplicate=P reorder=P corrupt=P (P in 0..1), delay=US, seed=N; or off")
      ->type_name("KEY=VALUE")
      ->check(CLI::Validator(
          [](std::string& kv) {
            if (kv == "off") return std::string();
            abi::SetFaultRequest scratch{};
            return apply_fault_setting(kv, &scratch);
          },
          "", "fault setting"));
}

void declare_capture(CLI::App& app, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand(
      "capture", "write the frames crossing the engine's ports (loopback included) to FILE");
  sub->add_option("--name", cl.capture.name, kNameHelp)->type_name("NAME");
  sub->add_option("-w", cl.capture.file, "the pcap file to write")->type_name("FILE")->required();
  sub->add_option("--count", cl.capture.count, "stop after N frames")->type_name("N");
  sub->add_option("--seconds", cl.capture.seconds, "stop after S seconds")->type_name("S");
}

void declare_port(CLI::App& app, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand(
      "port", "take the engine's port down or up: clients get IBV_EVENT_PORT_ERR / "
              "IBV_EVENT_PORT_ACTIVE, traffic stops");
  sub->add_option("--name", cl.port.name, kNameHelp)->type_name("NAME");
  sub->add_option("STATE", "up or down")
      ->required()
      ->check(CLI::IsMember({"up", "down"}))
      ->each([&cl](const std::string& s) { cl.port.up = s == "up"; });
}

// The options of tools/bench/uroce_bench.py, passed on as given.
void declare_bench(CLI::App& app, CommandLine& cl) {
  CLI::App* sub = app.add_subcommand(
      "bench", "run perftest through engines of its own beside the baselines (memcpy, shared "
               "memory, TCP); table, JSON, SVG");
  auto pass_flag = [&cl](const char* flag) {
    return [&cl, flag](std::int64_t) { cl.bench.script_args.push_back(flag); };
  };
  auto pass_option = [&cl](const char* flag) {
    return [&cl, flag](const std::string& v) { cl.bench.script_args.insert(cl.bench.script_args.end(), {flag, v}); };
  };
  sub->add_flag_function("--quick", pass_flag("--quick"), "a few sizes, short runs (a few minutes at most)");
  sub->add_option_function<std::string>("--out", pass_option("--out"),
                                        "directory for results.json, table.md, bench.svg")
      ->type_name("DIR");
  sub->add_flag_function("--no-two-hosts", pass_flag("--no-two-hosts"),
                         "skip the two-engine runs of the full bench");
  sub->add_flag_function("--keep", pass_flag("--keep"), "keep the logs and runtime directory");
  sub->add_option_function<std::string>(
         "--only", pass_option("--only"),
         "comma-separated parts to run: baselines, idle, perftest, ...")
      ->type_name("PARTS");
  sub->add_option_function<std::string>(
         "--load", pass_option("--load"),
         "N busy processes (shell loops, a session each) beside the runs: the documented load")
      ->type_name("N");
  sub->add_option_function<std::string>(
         "--against", pass_option("--against"),
         "A/B: run this build and BUILD (a build directory) alternately and compare the medians")
      ->type_name("BUILD");
  sub->add_option_function<std::string>("--runs", pass_option("--runs"), "runs per build with --against (default 5)")
      ->type_name("N");
  sub->add_option_function<std::string>("--tolerance", pass_option("--tolerance"),
                                        "with --against: how much worse a median may be before it is called "
                                        "worse (default 0.05)")
      ->type_name("F");
}

CLI::App* declare_help(CLI::App& app, std::string& topic) {
  CLI::App* sub = app.add_subcommand("help", "show the overview, or the options of COMMAND");
  sub->add_option("COMMAND", topic, "a command");
  return sub;
}

// The command closest to a mistyped one (edit distance at most 2), or "".
std::string closest_command(const CLI::App& app, const std::string& word) {
  std::string best;
  size_t best_distance = 3;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const std::string& name = sub->get_name();
    std::vector<size_t> row(name.size() + 1);
    for (size_t j = 0; j <= name.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= name.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (word[i - 1] != name[j - 1])});
        diagonal = above;
      }
    }
    if (row[name.size()] < best_distance) best_distance = row[name.size()], best = name;
  }
  return best;
}

template <typename T>
bool is(const CLI::Error& e) {
  return dynamic_cast<const T*>(&e) != nullptr;
}

// Help and --version (exit 0), else a bad command line: CLI11's message on
// one line naming the subcommand (exit kExitUsage). Without a subcommand the
// overview follows, as it does for an unknown one.
int answer(const CLI::App& app, const CLI::ParseError& e) {
  const auto subs = app.get_subcommands();
  if (is<CLI::CallForHelp>(e) || is<CLI::CallForAllHelp>(e)) {
    std::cout << (subs.empty() ? std::string(kUsage) : app.help());
    return 0;
  }
  if (is<CLI::CallForVersion>(e)) {
    std::cout << e.what() << '\n';
    return 0;
  }
  if (subs.empty()) {
    const std::vector<std::string> words = app.remaining();
    const bool unknown_command = !words.empty() && !words.front().starts_with("-");
    const bool no_command = words.empty() && is<CLI::RequiredError>(e);
    if (unknown_command) {  // one line, and the command meant
      const std::string near = closest_command(app, words.front());
      std::cerr << "uroce: unknown command '" << words.front() << "'"
                << (near.empty() ? "" : "; did you mean '" + near + "'?") << " (see 'uroce help')\n";
      return kExitUsage;
    }
    std::cerr << "uroce: "
              << (unknown_command ? "unknown command '" + words.front() + "'"
                  : no_command    ? std::string("no command given")
                                  : std::string(e.what()))
              << "\n\n"
              << kUsage;
    return kExitUsage;
  }
  // An option of the top level after the subcommand's name is the
  // subcommand's error too: its --help lists what it takes.
  return usage_error(subs.front()->get_name(), e.what());
}

}  // namespace

const char* usage_text() { return kUsage; }

int usage_error(const std::string& command, const std::string& message) {
  std::cerr << "uroce " << command << ": " << message << " (see 'uroce " << command << " --help')\n";
  return kExitUsage;
}

std::optional<CommandLine> parse_command_line(int argc, const char* const* argv, int* exit_status) {
  CommandLine cl;
  std::vector<std::string> start_passed_on, fault_settings;
  std::string help_topic;

  CLI::App app("uroce: a userspace soft-RoCE device", "uroce");
  app.set_version_flag("--version", std::string("uroce ") + UROCE_VERSION);
  app.add_option("--runtime-dir", cl.runtime_dir, "where engines keep NAME.sock, NAME.pid, NAME.log")
      ->type_name("DIR");
  app.require_subcommand(1);
  declare_start(app, cl, start_passed_on);
  declare_stop(app, cl);
  declare_show(app, cl);
  declare_run(app, cl);
  declare_env(app);
  declare_fault(app, cl, fault_settings);
  declare_capture(app, cl);
  declare_port(app, cl);
  declare_bench(app, cl);
  CLI::App* help = declare_help(app, help_topic);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_status = answer(app, e);
    return std::nullopt;
  }
  const CLI::App* sub = app.get_subcommands().front();
  cl.command = sub->get_name();

  if (sub == help) {
    *exit_status = 0;
    if (help_topic.empty() || help_topic == "help") {
      std::cout << kUsage;
      return std::nullopt;
    }
    const CLI::App* topic = nullptr;
    try {
      topic = app.get_subcommand(help_topic);
    } catch (const CLI::OptionNotFound&) {
      *exit_status = usage_error("help", "unknown command '" + help_topic + "'");
      return std::nullopt;
    }
    std::cout << topic->help("uroce");
    return std::nullopt;
  }
  if (cl.command == "start") {
    for (const char* flag : {"--ip", "--mac", "--port", "--netdev", "--users", "--group"})
      if (const CLI::Option* opt = sub->get_option(flag); opt->count())
        cl.start.engine_args.insert(cl.start.engine_args.end(), {flag, opt->as<std::string>()});
    std::vector<std::string> rest = sub->remaining();
    if (auto dashes = std::find(rest.begin(), rest.end(), "--"); dashes != rest.end()) rest.erase(dashes);
    cl.start.engine_args.insert(cl.start.engine_args.end(), rest.begin(), rest.end());
  }
  if (cl.command == "fault") {
    const std::string port = sub->get_option("--port")->count() ? sub->get_option("--port")->as<std::string>() : "";
    cl.fault.request.port = port == "loopback" ? abi::kFaultPortLoopback
                            : port == "wire"   ? abi::kFaultPortWire
                                               : abi::kFaultPortDefault;
    cl.fault.port = port;
    const bool off = std::find(fault_settings.begin(), fault_settings.end(), "off") != fault_settings.end();
    if (off && fault_settings.size() > 1) {
      *exit_status = usage_error("fault", "'off' takes no other setting");
      return std::nullopt;
    }
    cl.fault.action = fault_settings.empty() ? FaultArgs::Action::kShow
                      : off                  ? FaultArgs::Action::kOff
                                             : FaultArgs::Action::kSet;
    if (!off)
      for (const std::string& kv : fault_settings) apply_fault_setting(kv, &cl.fault.request);
    const abi::SetFaultRequest& r = cl.fault.request;
    cl.fault.any_set = r.drop || r.duplicate || r.reorder || r.corrupt || r.delay_us;
  }
  return cl;
}

}  // namespace uroce::tool
