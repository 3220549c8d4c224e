// Verbs the device does not offer yet: they fail as a real provider without
// the feature does (NULL with errno, or the errno as return value).
#include <cerrno>

#include "verbs_provider/provider.h"

UROCE_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
