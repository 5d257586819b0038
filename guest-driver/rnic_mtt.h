/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the MTT, the table of page bus addresses the RNIC's MRs point
 * into (docs/verbs.md §6). rnic_mtt.c; set up and freed with the engine (rnic_verbs.c),
 * its ranges taken and given back by MR registration (rnic_mr.c).
 */
#ifndef _RNIC_MTT_H
#define _RNIC_MTT_H

#include <linux/types.h>

struct rnic_nic;

int rnic_mtt_init(struct rnic_nic *nic);
void rnic_mtt_fini(struct rnic_nic *nic);
/* A free range of @n entries (first fit): its first entry in @offset, or -ENOMEM. */
int rnic_mtt_alloc(struct rnic_nic *nic, u32 n, u32 *offset);
void rnic_mtt_free(struct rnic_nic *nic, u32 offset, u32 n);

#endif /* _RNIC_MTT_H */
