/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the DMA mapping of a pinned MR, rnic_mr_p2p.c, for rnic_mr.c:
 * host memory directly, GPU memory peer-to-peer where the topology allows it, else a host
 * bounce buffer that MR_SYNC copies with rnic_mr_bounce_sync().
 */
#ifndef _RNIC_MR_P2P_H
#define _RNIC_MR_P2P_H

#include <linux/types.h>

struct rnic_mr;
struct rnic_nic;

int rnic_mr_map(struct rnic_nic *nic, struct rnic_mr *mr, bool strict, const char **why);
void rnic_mr_unmap(struct rnic_nic *nic, struct rnic_mr *mr);
void rnic_mr_bounce_sync(struct rnic_nic *nic, struct rnic_mr *mr, u64 off, u64 len,
			 bool to_bounce);

#endif /* _RNIC_MR_P2P_H */
