// What the drop-in libmlx5.so.1 exports. The library is compiled with
// -fvisibility=hidden, so every mlx5dv_* entry point is marked with this;
// libmlx5.map then binds each one to its rdma-core 44 version node.
#pragma once

#define UROCE_MLX5_EXPORT extern "C" __attribute__((visibility("default")))
