// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: completion queues (docs/verbs.md §4-5). A CQ is a ring of 2^n
 * 32-byte CQEs in DMA-coherent memory (at most RNIC_MAX_RING_BYTES, charged to the
 * caller's memory cgroup) and an MSI-X vector. Polling is in rnic_poll.c. A CQ a QP uses
 * cannot be destroyed; a sleeping POLL_CQ holds a reference and wakes when it dies.
 */
#include <linux/log2.h>
#include <linux/slab.h>

#include "rnic_verbs.h"

static void rnic_cq_release(struct kref *ref)
{
	kfree(container_of(ref, struct rnic_cq, ref));
}

void rnic_cq_put(struct rnic_cq *cq)
{
	kref_put(&cq->ref, rnic_cq_release);
}

static size_t rnic_cq_bytes(const struct rnic_cq *cq)
{
	return sizeof(*cq->ring) << cq->log_size;
}

int rnic_create_cq(struct rnic_ucontext *uc, struct rnic_create_cq *req)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	struct rnic_cq_ctx *ctx;
	struct rnic_cq *cq;
	int id, ret;

	if (req->entries == 0 || req->entries > (1U << nic->max_ring_log2)) {
		dev_warn_ratelimited(dev, "CREATE_CQ: %u entries (valid: 1..%u)\n",
				     req->entries, 1U << nic->max_ring_log2);
		return -EINVAL;
	}

	cq = kzalloc(sizeof(*cq), GFP_KERNEL_ACCOUNT);
	if (!cq)
		return -ENOMEM;
	kref_init(&cq->ref);
	cq->nic = nic;
	cq->log_size = order_base_2(req->entries);
	cq->ring = rnic_ring_alloc(nic, rnic_cq_bytes(cq), &cq->ring_dma);
	if (!cq->ring) {
		dev_warn_ratelimited(dev, "CREATE_CQ: cannot allocate a ring of %u CQEs\n",
				     1U << cq->log_size);
		ret = -ENOMEM;
		goto err_free;
	}

	id = ida_alloc_max(&nic->cq_ida, nic->max_cq - 1, GFP_KERNEL);
	if (id < 0) {
		dev_warn_ratelimited(dev, "CREATE_CQ: all %u CQs in use\n", nic->max_cq);
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_ring;
	}
	cq->cqn = id;
	rnic_num_start(nic, RNIC_NUM_CQ, cq->cqn);
	/* Vector 0 is for asynchronous errors; CQs share the others round-robin. */
	if (nic->rd.nvec > 1)
		cq->vector = 1 + (u32)atomic_inc_return(&nic->next_vector) % (nic->rd.nvec - 1);

	ret = xa_insert(&uc->cqs, cq->cqn, cq, GFP_KERNEL);
	if (ret)
		goto err_ida;

	mutex_lock(&nic->cmd_lock);
	ctx = &nic->cq_ctx[cq->cqn];
	memset(ctx, 0, sizeof(*ctx));
	ctx->ring_addr = cq->ring_dma;
	ctx->log_size = cq->log_size;
	ctx->msix_vector = cq->vector;
	ret = rnic_cmd(nic, RNIC_CMD_CREATE_CQ, cq->cqn);
	mutex_unlock(&nic->cmd_lock);
	if (ret)
		goto err_xa;

	req->cqn = cq->cqn;
	req->actual_entries = 1U << cq->log_size;
	req->vector = cq->vector;
	return 0;

err_xa:
	xa_erase(&uc->cqs, cq->cqn);
err_ida:
	rnic_num_put(nic, RNIC_NUM_CQ, cq->cqn);
err_ring:
	/* A failed CREATE_CQ left nothing in the device. */
	rnic_ring_free(nic, cq->ring, rnic_cq_bytes(cq), cq->ring_dma, true);
err_free:
	kfree(cq);
	return ret;
}

/* Drops the CQ from its file; the ring is freed, or kept when the device holds on to it. */
static void rnic_cq_drop(struct rnic_ucontext *uc, struct rnic_cq *cq, bool device_let_go)
{
	struct rnic_nic *nic = uc->nic;

	xa_erase(&uc->cqs, cq->cqn);
	if (device_let_go)
		rnic_num_put(nic, RNIC_NUM_CQ, cq->cqn);	/* else the device still has it */
	rnic_ring_free(nic, cq->ring, rnic_cq_bytes(cq), cq->ring_dma, device_let_go);
	cq->ring = NULL;
	/* A POLL_CQ asleep on it holds a reference; it wakes, sees dead and fails. */
	WRITE_ONCE(cq->dead, true);
	wake_up_all(&nic->rd.irq_wq);
	rnic_cq_put(cq);
}

/* Destroys a CQ no QP uses, at release or remove: whatever the device answers. */
void rnic_cq_destroy(struct rnic_ucontext *uc, struct rnic_cq *cq)
{
	rnic_cq_drop(uc, cq, rnic_cmd_release(uc->nic, RNIC_CMD_DESTROY_CQ, cq->cqn));
}

int rnic_destroy_cq(struct rnic_ucontext *uc, u32 cqn)
{
	struct rnic_cq *cq = xa_load(&uc->cqs, cqn);
	struct rnic_nic *nic = uc->nic;
	int ret;

	if (!cq)
		return -ENOENT;
	if (cq->users) {
		dev_warn_ratelimited(nic_dev(nic), "DESTROY_CQ %u: still used by QPs (%u send/receive queues)\n",
				     cqn, cq->users);
		return -EBUSY;
	}
	mutex_lock(&nic->cmd_lock);
	ret = rnic_cmd(nic, RNIC_CMD_DESTROY_CQ, cq->cqn);
	mutex_unlock(&nic->cmd_lock);
	/* Refused while the device runs: the CQ stays, the caller may try again. */
	if (ret && ret != -ENOENT && ret != -ENODEV)
		return ret;
	rnic_cq_drop(uc, cq, true);
	return 0;
}
