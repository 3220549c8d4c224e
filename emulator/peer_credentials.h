// What the kernel would check of the calling process for a privileged verb:
// its effective capabilities, read from /proc when the verb is called (the
// kernel's capable() looks at the caller at call time, not at open).
#pragma once

#include <sys/types.h>

namespace uroce::emulator {

// True if process pid has capability cap (CAP_NET_RAW, ...) in its effective
// set. A process that is gone or unreadable has none.
bool peer_has_capability(pid_t pid, int cap);

}  // namespace uroce::emulator
