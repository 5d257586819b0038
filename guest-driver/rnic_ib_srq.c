// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: shared receive queues of libibverbs contexts (contract minor 15,
 * docs/verbs.md §4.2, docs/ibverbs.md).
 *
 * The SRQ itself is rnic_srq.c's; here are the ib_core verbs around it. As for a QP's RQ,
 * the provider maps the SRQ's ring and its page of the doorbell page, writes RECV WQEs and
 * the producer index itself, and asks for the MMIO doorbell (POST_SRQ_RECV with no work
 * requests) only when the device's event index says so. Completions come on the CQ of the
 * QP that took the WQE, naming that QP; the provider finds the SRQ from the QP.
 *
 * The limit: modify_srq(IB_SRQ_LIMIT) arms it at the device (INIT -> INIT). The device
 * disarms it when a take leaves fewer WQEs than the limit and raises EQE_SRQ_LIMIT, which
 * rnic_ib_srq_event() turns into IB_EVENT_SRQ_LIMIT_REACHED, and query_srq reports 0 from
 * then on, as IBA 11.2.3 has it. No resizing (IB_SRQ_MAX_WR: -EOPNOTSUPP).
 */
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"
#include "uapi/rnic_ib_abi.h"

static struct rnic_ib_srq *to_isrq(struct ib_srq *ibsrq)
{
	return container_of(ibsrq, struct rnic_ib_srq, ibsrq);
}

int rnic_ib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		       struct ib_udata *udata)
{
	struct rnic_ib_srq *isrq = to_isrq(ibsrq);
	struct rnic_nic *nic = ib_nic(ibsrq->device);
	struct rnic_ib_create_srq_resp resp = {};
	struct rnic_ib_ucontext *ctx;
	struct rnic_ucontext *uc;
	struct rnic_srq *srq;
	int ret;

	if (!udata)
		return -EOPNOTSUPP;	/* kernel consumers are not offered */
	if (!rnic_ib_udata_in_ok(ibsrq->device, udata, "create_srq"))
		return -EINVAL;
	if (init->srq_type != IB_SRQT_BASIC || !nic->dbp || !rnic_nic_srq(nic))
		return -EOPNOTSUPP;
	ctx = rdma_udata_to_drv_context(udata, struct rnic_ib_ucontext, ibuc);
	uc = ctx->uc;
	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	ret = rnic_srq_create(uc, ib_pdn(ibsrq->pd), init->attr.max_wr, init->attr.max_sge,
			      init->attr.srq_limit, &srq);
	if (ret)
		goto out_unlock;
	isrq->uc = uc;
	isrq->qpn = srq->qpn;
	isrq->limit = init->attr.srq_limit;
	ret = rnic_ib_mmap_ring(ctx, srq->rq.ring, srq->rq.ring_bytes, srq->rq.ring_dma,
				&resp.ring_key, &isrq->ring_map);
	if (ret)
		goto err_destroy;
	ret = rnic_ib_mmap_db(ctx, RNIC_NUM_QP, srq->qpn, &resp.db_key, &isrq->db_map);
	if (ret)
		goto err_destroy;
	ret = xa_insert(&nic->ib_srqs, srq->qpn, isrq, GFP_KERNEL);	/* for its events */
	if (ret)
		goto err_destroy;
	resp.srqn = srq->qpn;
	resp.log_size = srq->rq.log_size;
	resp.log_stride = srq->rq.log_stride;
	resp.gen = srq->gen;
	resp.max_sge = srq->max_sge;
	rnic_uc_unlock(uc);

	init->attr.max_wr = 1U << srq->rq.log_size;
	init->attr.max_sge = resp.max_sge;
	ret = ib_respond_udata(udata, resp);	/* unlocked, as for QPs (rnic_ib_verbs.c) */
	if (ret)
		rnic_ib_destroy_srq(ibsrq, udata);
	return ret;

err_destroy:
	rnic_ib_mmap_remove(isrq->db_map);
	rnic_ib_mmap_remove(isrq->ring_map);
	rnic_srq_destroy(uc, srq);
out_unlock:
	rnic_uc_unlock(uc);
	return ret;
}

int rnic_ib_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		       enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct rnic_ib_srq *isrq = to_isrq(ibsrq);
	struct rnic_ucontext *uc = isrq->uc;
	struct rnic_srq *srq;
	int ret;

	if (!rnic_ib_udata_in_ok(ibsrq->device, udata, "modify_srq"))
		return -EINVAL;
	if (mask & ~IB_SRQ_LIMIT)
		return -EOPNOTSUPP;	/* IB_SRQ_MAX_WR: no resizing */
	if (!(mask & IB_SRQ_LIMIT))
		return 0;
	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	srq = xa_load(&uc->srqs, isrq->qpn);
	ret = srq ? rnic_srq_arm(uc, srq, attr->srq_limit) : -ENOENT;
	if (!ret)
		WRITE_ONCE(isrq->limit, attr->srq_limit);
	rnic_uc_unlock(uc);
	return ret;
}

int rnic_ib_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct rnic_ib_srq *isrq = to_isrq(ibsrq);
	struct rnic_ucontext *uc = isrq->uc;
	struct rnic_srq *srq;
	int ret;

	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	srq = xa_load(&uc->srqs, isrq->qpn);
	if (srq) {
		attr->max_wr = 1U << srq->rq.log_size;
		attr->max_sge = srq->max_sge;
		attr->srq_limit = READ_ONCE(isrq->limit);
	}
	rnic_uc_unlock(uc);
	return srq ? 0 : -ENOENT;
}

int rnic_ib_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct rnic_ib_srq *isrq = to_isrq(ibsrq);
	struct rnic_nic *nic = ib_nic(ibsrq->device);
	struct rnic_ucontext *uc = isrq->uc;
	struct rnic_srq *srq;

	xa_erase(&nic->ib_srqs, isrq->qpn);
	rnic_ib_events_sync(nic);	/* no event work still delivers to it */
	rnic_ib_mmap_remove(isrq->db_map);
	rnic_ib_mmap_remove(isrq->ring_map);
	mutex_lock(&uc->lock);		/* destroy must not fail; after removal: gone already */
	srq = uc->dead ? NULL : xa_load(&uc->srqs, isrq->qpn);
	if (srq)
		rnic_srq_destroy(uc, srq);
	rnic_uc_unlock(uc);
	return 0;
}

/* The provider's request for the MMIO doorbell: the producer index the page holds. */
int rnic_ib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
			  const struct ib_recv_wr **bad_wr)
{
	if (wr) {
		*bad_wr = wr;	/* user SRQs post through their ring */
		return -EINVAL;
	}
	rnic_ib_ring_db(ib_nic(ibsrq->device), to_isrq(ibsrq)->qpn, true);
	return 0;
}

/* EQE_SRQ_LIMIT for QPN @qpn (from the event work): the limit is disarmed. */
void rnic_ib_srq_event(struct rnic_nic *nic, u32 qpn)
{
	struct rnic_ib_srq *isrq = xa_load(&nic->ib_srqs, qpn);
	struct ib_event ev = { .event = IB_EVENT_SRQ_LIMIT_REACHED };

	if (!isrq) {
		atomic64_inc(&nic->stats.events_dropped);
		return;
	}
	WRITE_ONCE(isrq->limit, 0);
	ev.device = isrq->ibsrq.device;
	ev.element.srq = &isrq->ibsrq;
	if (isrq->ibsrq.event_handler)
		isrq->ibsrq.event_handler(&ev, isrq->ibsrq.srq_context);
}
