/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the doorbell page (docs/verbs.md §3.1).
 *
 * When the RNIC offers it (RNIC_CAP_DB_PAGE) and the module parameter db_page is set
 * (default), producer indices go into BAR2 with plain stores and the MMIO doorbell is rung
 * only when the device's event index asks for it; CQ consumer indices go into BAR2 too.
 * Without the page everything goes through the BAR0 doorbell registers, as before.
 */
#ifndef _RNIC_DBPAGE_H
#define _RNIC_DBPAGE_H

#include <linux/types.h>

#include "uapi/rnic_emu_ring.h"	/* rnic_need_kick(), the page offsets, doorbell values */

struct rnic_nic;

u32 rnic_dbpage_init(struct rnic_nic *nic);
void rnic_dbpage_fini(struct rnic_nic *nic);
void rnic_ring_wq(struct rnic_nic *nic, u32 qpn, bool recv, u16 old, u16 new);
void rnic_cq_set_ci(struct rnic_nic *nic, u32 cqn, u16 ci);

#endif /* _RNIC_DBPAGE_H */
