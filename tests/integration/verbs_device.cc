// Verbs semantics, part 6: what the device says about itself (queries of the
// device, port, GID table and P_Keys) and what vendor libraries loaded beside
// our libibverbs see when they look at it.
#include <dlfcn.h>

#include <cstring>

#include "tests/integration/verbs_fixture.h"

// rdma-core's private driver API (driver.h is not installed).
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                  int* type);

namespace vt {
namespace {

class Device : public VerbsTest {};

TEST_F(Device, VendorIsNeitherMellanoxNorAmazon) {
  ibv_device_attr attr{};
  ASSERT_EQ(ibv_query_device(ctx_, &attr), 0);
  EXPECT_NE(attr.vendor_id, 0x02c9u);
  EXPECT_NE(attr.vendor_id, 0x1d0fu);
  EXPECT_NE(attr.node_guid, 0u);
  EXPECT_NE(ibv_get_device_guid(ctx_->device), 0u);
  EXPECT_EQ(ibv_get_device_guid(ctx_->device), attr.node_guid);
}

// mlx5dv_is_supported() reads verbs_device::ops behind our ibv_device and
// must answer "no" without crashing (libmlx5 is what perftest links).
TEST_F(Device, Mlx5DirectVerbsSayNotSupported) {
  void* mlx5 = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!mlx5) GTEST_SKIP() << "libmlx5.so.1 not installed: " << dlerror();
  auto is_supported = reinterpret_cast<bool (*)(ibv_device*)>(dlsym(mlx5, "mlx5dv_is_supported"));
  ASSERT_NE(is_supported, nullptr);
  EXPECT_FALSE(is_supported(ctx_->device));
  dlclose(mlx5);
}

TEST_F(Device, DeviceIndexIsStableAndNamesMatch) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  bool found = false;
  for (int i = 0; i < n; ++i) {
    if (std::strcmp(ibv_get_device_name(list[i]), ibv_get_device_name(ctx_->device)) == 0) {
      found = true;
      EXPECT_EQ(ibv_get_device_index(list[i]), ibv_get_device_index(ctx_->device));
      EXPECT_GE(ibv_get_device_index(list[i]), 0);
    }
  }
  EXPECT_TRUE(found);
  ibv_free_device_list(list);
}

TEST_F(Device, GidTableHoldsRoceV2Gids) {
  ibv_gid_entry entries[16];
  const ssize_t n = ibv_query_gid_table(ctx_, entries, 16, 0);
  ASSERT_GE(n, 1);
  bool ipv4_mapped = false;
  for (ssize_t i = 0; i < n; ++i) {
    EXPECT_EQ(entries[i].gid_type, uint32_t(IBV_GID_TYPE_ROCE_V2));
    EXPECT_EQ(entries[i].port_num, 1u);
    ibv_gid_entry one{};
    ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, entries[i].gid_index, &one, 0), 0);
    EXPECT_EQ(std::memcmp(one.gid.raw, entries[i].gid.raw, 16), 0);
    ibv_gid g{};
    ASSERT_EQ(ibv_query_gid(ctx_, 1, int(entries[i].gid_index), &g), 0);
    EXPECT_EQ(std::memcmp(g.raw, one.gid.raw, 16), 0);
    int sysfs_type = -1;
    ASSERT_EQ(ibv_query_gid_type(ctx_, 1, entries[i].gid_index, &sysfs_type), 0);
    EXPECT_EQ(sysfs_type, 1) << "IBV_GID_TYPE_SYSFS_ROCE_V2";
    const uint8_t* r = entries[i].gid.raw;
    if (r[10] == 0xff && r[11] == 0xff && !r[0]) ipv4_mapped = true;
  }
  EXPECT_TRUE(ipv4_mapped) << "a RoCE v2 GID built from the engine's IPv4 address";
  // A table too small for every entry is refused, as rdma-core does.
  EXPECT_LT(ibv_query_gid_table(ctx_, entries, size_t(n - 1), 0), 0);
  // Flags are reserved; unknown ports and indices are errors.
  ibv_gid_entry e{};
  EXPECT_NE(ibv_query_gid_ex(ctx_, 1, 0, &e, 1), 0);
  EXPECT_NE(ibv_query_gid_ex(ctx_, 2, 0, &e, 0), 0);
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  EXPECT_NE(ibv_query_gid_ex(ctx_, 1, uint32_t(pa.gid_tbl_len), &e, 0), 0);
}

TEST_F(Device, PkeyTableHasTheDefaultPkey) {
  __be16 pkey = 0;
  ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &pkey), 0);
  EXPECT_EQ(ntohs(pkey), 0xffff);
  EXPECT_EQ(ibv_get_pkey_index(ctx_, 1, htons(0xffff)), 0);
  EXPECT_LT(ibv_get_pkey_index(ctx_, 1, htons(0x1234)), 0);
  EXPECT_NE(ibv_query_pkey(ctx_, 1, 1, &pkey), 0);
}

TEST_F(Device, PortQueryWorksThroughBothStructSizes) {
  ibv_port_attr now{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &now), 0);  // the inline, extended path
  EXPECT_EQ(now.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(now.state, IBV_PORT_ACTIVE);
  EXPECT_GT(now.gid_tbl_len, 0);
  // The exported symbol with rdma-core's older, shorter struct.
  using CompatQueryPort = int (*)(ibv_context*, uint8_t, ibv_port_attr*);
  auto compat = reinterpret_cast<CompatQueryPort>(dlsym(RTLD_DEFAULT, "ibv_query_port"));
  ASSERT_NE(compat, nullptr);
  ibv_port_attr old;
  std::memset(&old, 0xab, sizeof(old));
  ASSERT_EQ(compat(ctx_, 1, &old), 0);
  EXPECT_EQ(old.state, now.state);
  EXPECT_EQ(old.active_mtu, now.active_mtu);
  EXPECT_EQ(old.link_layer, now.link_layer);
  EXPECT_EQ(old.port_cap_flags2, 0xabab) << "the compat struct ends before port_cap_flags2";
  EXPECT_NE(ibv_query_port(ctx_, 2, &now), 0);
}

TEST_F(Device, QueryDeviceExSizesAreHonoured) {
  ibv_device_attr_ex full{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &full), 0);
  EXPECT_EQ(full.phys_port_cnt_ex, 1u);
  EXPECT_GT(full.orig_attr.max_qp, 0);
  EXPECT_GT(full.orig_attr.max_cqe, 0);
  EXPECT_GT(full.orig_attr.max_qp_wr, 0);
  EXPECT_NE(full.orig_attr.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN, 0);
  ibv_query_device_ex_input bad{};
  bad.comp_mask = 1;
  EXPECT_NE(ibv_query_device_ex(ctx_, &bad, &full), 0);
}

}  // namespace
}  // namespace vt
