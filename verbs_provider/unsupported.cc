// Verbs the device does not offer yet: they fail as a real provider without
// the feature does (NULL with errno, or the errno as return value).
#include <cerrno>

#include "verbs_provider/provider.h"

UROCE_EXPORT ibv_srq* ibv_create_srq(ibv_pd*, ibv_srq_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}
UROCE_EXPORT int ibv_modify_srq(ibv_srq*, ibv_srq_attr*, int) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_query_srq(ibv_srq*, ibv_srq_attr*) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_destroy_srq(ibv_srq*) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
