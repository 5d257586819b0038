// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * rdma-core provider for the rnic-emu RNIC (PCI 1234:52e1), see docs/ibverbs.md.
 *
 * libibverbs loads it for an RDMA device whose PCI function matches our IDs (the kernel's
 * guest-driver/rnic_ib.c registers it as rnicN). What it does: device and port queries and
 * protection domains, through the kernel's generic uverbs commands.
 *
 * What it does not (yet): CQs, QPs, MRs and the data path; libibverbs answers their verbs
 * with EOPNOTSUPP.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rnic.h"

#define RNIC_ABI_VERSION	1

static const struct verbs_match_ent rnic_match_table[] = {
	VERBS_PCI_MATCH(0x1234, 0x52e1, NULL),
	{},
};

static int rnic_query_device_ex(struct ibv_context *context,
				const struct ibv_query_device_ex_input *input,
				struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);

	return ibv_cmd_query_device_any(context, input, attr, attr_size, &resp, &resp_size);
}

static int rnic_query_port(struct ibv_context *context, uint8_t port,
			   struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd;

	return ibv_cmd_query_port(context, port, attr, &cmd, sizeof(cmd));
}

static struct ibv_pd *rnic_alloc_pd(struct ibv_context *context)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd;
	struct ibv_pd *pd;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	if (ibv_cmd_alloc_pd(context, pd, &cmd, sizeof(cmd), &resp, sizeof(resp))) {
		free(pd);
		return NULL;
	}
	return pd;
}

static int rnic_dealloc_pd(struct ibv_pd *pd)
{
	int ret = ibv_cmd_dealloc_pd(pd);

	if (!ret)
		free(pd);
	return ret;
}

static void rnic_free_context(struct ibv_context *ibctx)
{
	struct rnic_context *ctx = container_of(ibctx, struct rnic_context, ibv_ctx.context);

	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops rnic_ctx_ops = {
	.query_device_ex = rnic_query_device_ex,
	.query_port = rnic_query_port,
	.alloc_pd = rnic_alloc_pd,
	.dealloc_pd = rnic_dealloc_pd,
	.free_context = rnic_free_context,
};

static struct verbs_context *rnic_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						void *private_data)
{
	struct ib_uverbs_get_context_resp resp;
	struct ibv_get_context cmd;
	struct rnic_context *ctx;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	if (ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd), &resp, sizeof(resp))) {
		verbs_uninit_context(&ctx->ibv_ctx);
		free(ctx);
		return NULL;
	}
	verbs_set_ops(&ctx->ibv_ctx, &rnic_ctx_ops);
	return &ctx->ibv_ctx;
}

static struct verbs_device *rnic_device_alloc(struct verbs_sysfs_dev *sysfs_dev)
{
	struct rnic_device *dev = calloc(1, sizeof(*dev));

	return dev ? &dev->ibv_dev : NULL;
}

static void rnic_uninit_device(struct verbs_device *verbs_device)
{
	free(container_of(verbs_device, struct rnic_device, ibv_dev));
}

static const struct verbs_device_ops rnic_dev_ops = {
	.name = "rnic",
	.match_min_abi_version = RNIC_ABI_VERSION,
	.match_max_abi_version = RNIC_ABI_VERSION,
	.match_table = rnic_match_table,
	.alloc_device = rnic_device_alloc,
	.uninit_device = rnic_uninit_device,
	.alloc_context = rnic_alloc_context,
};
PROVIDER_DRIVER(rnic, rnic_dev_ops);
