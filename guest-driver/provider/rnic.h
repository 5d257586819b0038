/* SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB */
/*
 * rdma-core provider for the rnic-emu RNIC: the provider's objects (docs/ibverbs.md).
 * The kernel side is guest-driver/rnic_ib.c.
 */
#ifndef RNIC_PROVIDER_H
#define RNIC_PROVIDER_H

#include <infiniband/driver.h>

struct rnic_device {
	struct verbs_device ibv_dev;
};

struct rnic_context {
	struct verbs_context ibv_ctx;
};

#endif /* RNIC_PROVIDER_H */
