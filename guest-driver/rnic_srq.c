// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: shared receive queues (contract minor 15, docs/verbs.md §4.2).
 *
 * An SRQ is a QP number whose context has service QP_TYPE_SRQ: the driver gives it an RQ
 * ring in DMA-coherent memory and takes it straight from RESET to INIT (its PD, ring and
 * limit), where it stays; INIT -> INIT arms a new limit. RC QPs created on it
 * (rnic_create_qp() with the SRQ) have no RQ ring of their own. The device refuses to
 * destroy an SRQ a QP still receives from; ib_core destroys those QPs first. The ib_core
 * verbs and the events are in rnic_ib_srq.c; only ib_core user contexts make SRQs.
 */
#include <linux/slab.h>

#include "rnic_verbs.h"

static void rnic_srq_fill_ctx(const struct rnic_srq *srq, struct rnic_qp_ctx *ctx, u32 limit)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->state = RNIC_QPS_INIT;
	ctx->rq_log_size = srq->rq.log_size;
	ctx->rq_log_stride = srq->rq.log_stride;
	ctx->rq_addr = srq->rq.ring_dma;
	ctx->pd = srq->pd->pdn;
	ctx->dest_qpn = RNIC_QP_TYPE_SRQ << 24;
	ctx->rnr_timer_us = limit;	/* an SRQ's limit (0: not armed) */
}

/* RESET -> INIT (creation) or INIT -> INIT (a new limit) at the device. */
static int rnic_srq_modify(struct rnic_nic *nic, struct rnic_srq *srq, u32 limit)
{
	int ret;

	mutex_lock(&nic->cmd_lock);
	rnic_srq_fill_ctx(srq, &nic->qp_ctx[srq->qpn], limit);
	ret = rnic_cmd(nic, RNIC_CMD_MODIFY_QP, srq->qpn);
	mutex_unlock(&nic->cmd_lock);
	return ret;
}

/**
 * rnic_srq_create() - a new SRQ of a context, in INIT at the device
 * @uc: the context (its lock held)
 * @pdn: its PD
 * @max_wr: WQEs it holds: 1 .. 2^max_ring_log2, rounded up to a power of two
 * @max_sge: SGEs per WQE: 1 .. RNIC_UAPI_MAX_SGE (the stride may allow more)
 * @limit: the limit to arm, at most the (rounded) max_wr; 0: none
 * @out: the SRQ, in uc->srqs
 *
 * Return: 0, -EINVAL (bad sizes, a device before minor 15), -ENOENT (no such PD), -ENOMEM
 * (no memory, no QP number) or the device's refusal.
 */
int rnic_srq_create(struct rnic_ucontext *uc, u32 pdn, u32 max_wr, u32 max_sge, u32 limit,
		    struct rnic_srq **out)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	u32 bytes = sizeof(struct rnic_wqe) + max_sge * sizeof(struct rnic_sge);
	struct rnic_srq *srq;
	struct rnic_pd *pd;
	int id, ret;

	if (!rnic_nic_srq(nic))
		return -EOPNOTSUPP;
	pd = xa_load(&uc->pds, pdn);
	if (!pd)
		return -ENOENT;
	if (!max_wr || max_wr > 1U << nic->max_ring_log2 || !max_sge ||
	    max_sge > RNIC_UAPI_MAX_SGE || limit > roundup_pow_of_two(max_wr)) {
		dev_warn_ratelimited(dev, "CREATE_SRQ: max_wr %u (1..%u), max_sge %u (1..%u), limit %u\n",
				     max_wr, 1U << nic->max_ring_log2, max_sge, RNIC_UAPI_MAX_SGE,
				     limit);
		return -EINVAL;
	}
	srq = kzalloc(sizeof(*srq), GFP_KERNEL_ACCOUNT);
	if (!srq)
		return -ENOMEM;
	ret = rnic_wq_alloc(nic, &srq->rq, max_wr, bytes);
	if (ret)
		goto err_free;
	/* An SRQ takes a QP number: the QPs' IDA, above the special QPs. */
	id = ida_alloc_range(&nic->qp_ida, RNIC_FIRST_QPN, nic->max_qp - 1, GFP_KERNEL);
	if (id < 0) {
		dev_warn_ratelimited(dev, "CREATE_SRQ: all %u QP numbers in use\n",
				     nic->max_qp - RNIC_FIRST_QPN);
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_free;
	}
	srq->qpn = id;
	rnic_num_start(nic, RNIC_NUM_QP, srq->qpn);
	srq->gen = ++nic->qp_gen[srq->qpn];
	srq->pd = pd;
	srq->max_sge = min_t(u32, RNIC_UAPI_MAX_SGE,
			     ((1U << srq->rq.log_stride) - sizeof(struct rnic_wqe)) /
			     sizeof(struct rnic_sge));
	ret = rnic_srq_modify(nic, srq, limit);
	if (ret)
		goto err_num;
	ret = xa_insert(&uc->srqs, srq->qpn, srq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	pd->users++;
	*out = srq;
	return 0;

err_destroy:
	if (!rnic_cmd_release(nic, RNIC_CMD_DESTROY_QP, srq->qpn)) {
		rnic_wq_free(nic, &srq->rq, false);	/* the device keeps it: a zombie */
		kfree(srq);
		return ret;
	}
err_num:
	rnic_num_put(nic, RNIC_NUM_QP, srq->qpn);
err_free:
	rnic_wq_free(nic, &srq->rq, true);
	kfree(srq);
	return ret;
}

/* Arms @limit (0: disarms); -EINVAL above the SRQ's size. */
int rnic_srq_arm(struct rnic_ucontext *uc, struct rnic_srq *srq, u32 limit)
{
	if (limit > 1U << srq->rq.log_size)
		return -EINVAL;
	return rnic_srq_modify(uc->nic, srq, limit);
}

/*
 * Destroys an SRQ at the device; its ring is freed only when the device let go of it (it
 * does not while a QP receives from it: ib_core never asks then).
 */
void rnic_srq_destroy(struct rnic_ucontext *uc, struct rnic_srq *srq)
{
	struct rnic_nic *nic = uc->nic;
	bool let_go = rnic_cmd_release(nic, RNIC_CMD_DESTROY_QP, srq->qpn);

	if (srq->users)
		dev_warn_ratelimited(nic_dev(nic), "SRQ %u destroyed with %u QPs on it\n", srq->qpn,
				     srq->users);
	xa_erase(&uc->srqs, srq->qpn);
	if (let_go)
		rnic_num_put(nic, RNIC_NUM_QP, srq->qpn);
	srq->pd->users--;
	rnic_wq_free(nic, &srq->rq, let_go);
	kfree(srq);
}
