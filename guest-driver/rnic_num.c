// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the lifetime of a QP or CQ number. A number names the object's
 * context-table slot and its page of the doorbell page (docs/verbs.md §3.1), so it goes
 * back to its IDA only when nothing names it any more:
 *
 *   - the object, until it is destroyed and the device let go of it (a number the device
 *     still holds is never reused);
 *   - each user mapping of its doorbell-page page, until ib_core's mmap_free ran for it
 *     (rnic_ib_mmap.c). rdma_user_mmap_entry_remove() at destroy only stops new mappings;
 *     a VMA that lives on could otherwise ring the doorbells of the next QP or CQ of any
 *     process that got the number: replayed WQEs, CQEs overwritten before they are polled.
 *
 * The counts live as long as the IDAs (rnic_verbs_init()/fini()); ib_core has freed every
 * mapping of a device once ib_unregister_device() returned, before fini.
 */
#include <linux/slab.h>

#include "rnic_verbs.h"

static atomic_t *rnic_num_refs(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n)
{
	if (kind == RNIC_NUM_QP)
		return nic->qp_num_refs && n < nic->max_qp ? &nic->qp_num_refs[n] : NULL;
	return nic->cq_num_refs && n < nic->max_cq ? &nic->cq_num_refs[n] : NULL;
}

int rnic_num_init(struct rnic_nic *nic)
{
	nic->qp_num_refs = kvcalloc(nic->max_qp, sizeof(*nic->qp_num_refs), GFP_KERNEL);
	nic->cq_num_refs = kvcalloc(nic->max_cq, sizeof(*nic->cq_num_refs), GFP_KERNEL);
	if (nic->qp_num_refs && nic->cq_num_refs)
		return 0;
	rnic_num_fini(nic);
	return -ENOMEM;
}

void rnic_num_fini(struct rnic_nic *nic)
{
	kvfree(nic->qp_num_refs);
	kvfree(nic->cq_num_refs);
	nic->qp_num_refs = NULL;
	nic->cq_num_refs = NULL;
}

/* A number just taken from its IDA: its object holds it. */
void rnic_num_start(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n)
{
	atomic_t *r = rnic_num_refs(nic, kind, n);

	if (r)
		atomic_set(r, 1);
}

/* Another holder (a mapping of the number's doorbell-page page); false if it has none. */
bool rnic_num_get(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n)
{
	atomic_t *r = rnic_num_refs(nic, kind, n);

	return r && atomic_inc_not_zero(r);
}

/* A holder is done with the number; the last one gives it back to the IDA. */
void rnic_num_put(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n)
{
	atomic_t *r = rnic_num_refs(nic, kind, n);

	if (!r || WARN_ON_ONCE(atomic_read(r) <= 0) || !atomic_dec_and_test(r))
		return;
	ida_free(kind == RNIC_NUM_QP ? &nic->qp_ida : &nic->cq_ida, n);
}
