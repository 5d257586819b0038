// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: CQs, QPs and MRs of libibverbs contexts (docs/ibverbs.md).
 *
 * Each callback translates ib_core's arguments into the character device's request
 * structures and calls the same functions /dev/rnic_emuN's ioctls call (rnic_cq.c,
 * rnic_qp.c, rnic_mr.c) on the context's struct rnic_ucontext, under the same lock: one
 * implementation of each verb. What is particular to ib_core is here: the rings and
 * doorbell pages offered for mmap (kernel bypass: the provider writes WQEs and indices and
 * reads CQEs itself), the MMIO doorbell rung on request (POST_SEND/POST_RECV with no work
 * requests: the device's event index asked for it), CQ arming and the completion handler
 * called from the CQ's interrupt, and RoCE addressing (the AH's GID -> dest_ip, or on a
 * device of contract 1.9 an IPv6 GID -> the QP path's dest_gid).
 *
 * Not offered: kernel consumers (CQs and QPs need a user context), QP types other than RC
 * and UC, a DMA MR (atomics from contract minor 12); GPU memory (a mapping of BAR1, or a GPU's dma-buf through
 * reg_user_mr_dmabuf) registers only peer-to-peer (strict: no bounce buffer, which would
 * need MR_SYNC calls libibverbs cannot make).
 */
#include <linux/interrupt.h>
#include <linux/slab.h>
#include <linux/unaligned.h>
#include <net/ipv6.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"
#include "uapi/rnic_emu_ring.h"
#include "uapi/rnic_ib_abi.h"

/* IBA's RNR NAK timer encoding (table 45), in microseconds. */
static const u32 rnic_ib_rnr_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
};

static struct rnic_ib_cq *to_icq(struct ib_cq *ibcq)
{
	return container_of(ibcq, struct rnic_ib_cq, ibcq);
}

static struct rnic_ib_qp *to_iqp(struct ib_qp *ibqp)
{
	return container_of(ibqp, struct rnic_ib_qp, ibqp);
}

/* Destroy paths: ib_core must not fail them; after removal the objects are gone already. */
static void rnic_ib_uc_lock_destroy(struct rnic_ucontext *uc)
{
	mutex_lock(&uc->lock);
}

/*
 * A creation's response is copied to user space after the context's lock is dropped: the
 * copy may wait as long as the memory's owner likes (a FUSE-backed page), and GPU removal
 * takes that lock under the P2P registry's. If the copy fails, the object, complete by
 * then, is destroyed by the destroy callback itself.
 */

/* The FLUSH grants of IB access flags, as the device's bits (contract minor 14). */
static u32 rnic_ib_flush_access(int access)
{
	return (access & IB_ACCESS_FLUSH_GLOBAL ? RNIC_ACCESS_FLUSH_GLOBAL : 0) |
	       (access & IB_ACCESS_FLUSH_PERSISTENT ? RNIC_ACCESS_FLUSH_PERSISTENT : 0);
}

/* ---- CQs ---- */

int rnic_ib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		      struct uverbs_attr_bundle *attrs)
{
	struct rnic_ib_cq *cq = to_icq(ibcq);
	struct rnic_nic *nic = ib_nic(ibcq->device);
	struct rnic_ib_create_cq_resp resp = {};
	struct rnic_create_cq req = {};
	struct rnic_ib_ucontext *ctx;
	struct rnic_ucontext *uc;
	struct ib_udata *udata;
	struct rnic_cq *rcq;
	int ret;

	if (!attrs || !attrs->context)
		return -EOPNOTSUPP;	/* kernel CQs are not offered */
	udata = &attrs->driver_udata;
	if (!rnic_ib_udata_in_ok(ibcq->device, udata, "create_cq"))
		return -EINVAL;
	if (attr->flags || !nic->dbp)
		return -EOPNOTSUPP;	/* user CQs need the doorbell page */
	ctx = rdma_udata_to_drv_context(udata, struct rnic_ib_ucontext, ibuc);
	uc = ctx->uc;
	req.entries = attr->cqe;

	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	ret = rnic_create_cq(uc, &req);
	if (ret)
		goto out_unlock;
	rcq = xa_load(&uc->cqs, req.cqn);
	cq->uc = uc;
	cq->cqn = req.cqn;
	cq->vector = req.vector;
	ret = rnic_ib_mmap_ring(ctx, rcq->ring, sizeof(*rcq->ring) << rcq->log_size,
				rcq->ring_dma, &resp.ring_key, &cq->ring_map);
	if (ret)
		goto err_destroy;
	ret = rnic_ib_mmap_db(ctx, RNIC_NUM_CQ, cq->cqn, &resp.db_key, &cq->db_map);
	if (ret)
		goto err_destroy;
	resp.cqn = cq->cqn;
	resp.log_size = rcq->log_size;
	ret = xa_insert(&nic->ib_cqs, cq->cqn, cq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	ibcq->cqe = req.actual_entries;
	rnic_uc_unlock(uc);
	ret = ib_respond_udata(udata, resp);	/* unlocked: see above */
	if (ret)
		rnic_ib_destroy_cq(ibcq, udata);
	return ret;

err_destroy:
	rnic_ib_mmap_remove(cq->db_map);
	rnic_ib_mmap_remove(cq->ring_map);
	rnic_cq_destroy(uc, rcq);
out_unlock:
	rnic_uc_unlock(uc);
	return ret;
}

int rnic_ib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct rnic_ib_cq *cq = to_icq(ibcq);
	struct rnic_nic *nic = ib_nic(ibcq->device);
	struct rnic_ucontext *uc = cq->uc;
	struct rnic_cq *rcq;
	unsigned int i;

	xa_erase(&nic->ib_cqs, cq->cqn);
	/*
	 * No handler still sees it: rnic_ib_cq_event() walks every CQ from each vector (it
	 * skips those of other vectors, but has looked at them), so wait for all of them.
	 */
	for (i = 0; i < nic->rd.nvec; i++)
		synchronize_irq(nic->rd.vecs[i].irq);
	rnic_ib_events_sync(nic);	/* nor an event work */
	rnic_ib_mmap_remove(cq->db_map);
	rnic_ib_mmap_remove(cq->ring_map);
	rnic_ib_uc_lock_destroy(uc);
	rcq = uc->dead ? NULL : xa_load(&uc->cqs, cq->cqn);
	if (rcq)
		rnic_cq_destroy(uc, rcq);
	rnic_uc_unlock(uc);
	return 0;
}

/*
 * Arms the CQ. The provider stored its consumer index into the CQ's doorbell page first,
 * so the device raises the vector at once if completions arrived since it last polled.
 */
int rnic_ib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct rnic_ib_cq *cq = to_icq(ibcq);
	struct rnic_nic *nic = ib_nic(ibcq->device);

	atomic_set(&cq->armed, 1);
	iowrite32(rnic_db_value(cq->cqn, 0), nic->rd.bar0 + CQ_ARM);
	return 0;
}

/* Hard-irq context: completion events for the armed CQs of vector @vec. */
bool rnic_ib_cq_event(struct rnic_nic *nic, unsigned int vec)
{
	struct rnic_ib_cq *cq;
	unsigned long i;
	bool any = false;

	xa_for_each(&nic->ib_cqs, i, cq) {
		if (cq->vector != vec || !atomic_xchg(&cq->armed, 0))
			continue;
		any = true;
		if (cq->ibcq.comp_handler)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	}
	return any;
}

/* ---- QPs ---- */

int rnic_ib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct rnic_ib_qp *qp = to_iqp(ibqp);
	struct rnic_nic *nic = ib_nic(ibqp->device);
	struct rnic_ib_create_qp_resp resp = {};
	struct rnic_create_qp req = {};
	struct rnic_ib_ucontext *ctx;
	struct rnic_srq *srq = NULL;
	struct rnic_ucontext *uc;
	struct rnic_qp *rqp;
	int ret;

	if (!udata)
		return -EOPNOTSUPP;	/* kernel QPs are not offered */
	if (!rnic_ib_udata_in_ok(ibqp->device, udata, "create_qp"))
		return -EINVAL;
	if (init->create_flags || !nic->dbp || (init->srq && !rnic_nic_srq(nic)))
		return -EOPNOTSUPP;
	if (init->qp_type == IB_QPT_UC && rnic_nic_uc(nic))
		req.qp_type = RNIC_QP_TYPE_UC;
	else if (init->qp_type == IB_QPT_UD && rnic_nic_ud(nic) && !init->srq)
		req.qp_type = RNIC_QP_TYPE_UD;	/* minor 16; the device attaches no UD QP to an SRQ */
	else if (init->qp_type != IB_QPT_RC)
		return -EOPNOTSUPP;
	if (!init->send_cq || !init->recv_cq)
		return -EINVAL;
	ctx = rdma_udata_to_drv_context(udata, struct rnic_ib_ucontext, ibuc);
	uc = ctx->uc;
	req.pd = ib_pdn(ibqp->pd);
	req.send_cqn = to_icq(init->send_cq)->cqn;
	req.recv_cqn = to_icq(init->recv_cq)->cqn;
	/* The device wants at least one slot and one receive SGE. */
	req.max_send_wr = max(init->cap.max_send_wr, 1U);
	req.max_recv_wr = max(init->cap.max_recv_wr, 1U);
	req.max_send_sge = init->cap.max_send_sge;
	req.max_recv_sge = max(init->cap.max_recv_sge, 1U);
	req.max_inline = init->cap.max_inline_data;

	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	if (init->srq) {
		/* An SRQ of this context (minor 15): the QP gets no RQ ring. */
		srq = xa_load(&uc->srqs, rnic_ib_srqn(init->srq));
		ret = srq ? 0 : -EINVAL;
		if (ret)
			goto out_unlock;
	}
	ret = rnic_create_qp(uc, &req, srq);
	if (ret)
		goto out_unlock;
	rqp = xa_load(&uc->qps, req.qpn);
	qp->uc = uc;
	qp->qpn = req.qpn;
	qp->state = IB_QPS_RESET;
	qp->min_rnr_us = rqp->rnr_timer_us;
	ret = rnic_ib_mmap_ring(ctx, rqp->sq.ring, rqp->sq.ring_bytes, rqp->sq.ring_dma,
				&resp.sq_key, &qp->sq_map);
	if (ret)
		goto err_destroy;
	if (!srq) {
		ret = rnic_ib_mmap_ring(ctx, rqp->rq.ring, rqp->rq.ring_bytes, rqp->rq.ring_dma,
					&resp.rq_key, &qp->rq_map);
		if (ret)
			goto err_destroy;
	}
	ret = rnic_ib_mmap_db(ctx, RNIC_NUM_QP, qp->qpn, &resp.db_key, &qp->db_map);
	if (ret)
		goto err_destroy;
	resp.qpn = qp->qpn;
	resp.sq_log_size = rqp->sq.log_size;
	resp.sq_log_stride = rqp->sq.log_stride;
	resp.rq_log_size = rqp->rq.log_size;
	resp.rq_log_stride = rqp->rq.log_stride;	/* 0: on an SRQ, no RQ to map */
	resp.max_inline = req.max_inline;
	resp.gen = rqp->gen;
	ret = xa_insert(&nic->ib_qps, qp->qpn, qp, GFP_KERNEL);	/* for its events */
	if (ret)
		goto err_destroy;
	rnic_uc_unlock(uc);

	ibqp->qp_num = qp->qpn;
	init->cap.max_send_wr = req.max_send_wr;
	init->cap.max_recv_wr = req.max_recv_wr;
	init->cap.max_send_sge = req.max_send_sge;
	init->cap.max_recv_sge = req.max_recv_sge;
	init->cap.max_inline_data = req.max_inline;
	ret = ib_respond_udata(udata, resp);	/* unlocked: see above */
	if (ret)
		rnic_ib_destroy_qp(ibqp, udata);
	return ret;

err_destroy:
	xa_erase(&nic->ib_qps, qp->qpn);
	rnic_ib_events_sync(nic);
	rnic_ib_mmap_remove(qp->db_map);
	rnic_ib_mmap_remove(qp->rq_map);
	rnic_ib_mmap_remove(qp->sq_map);
	rnic_qp_destroy(uc, rqp);
out_unlock:
	rnic_uc_unlock(uc);
	return ret;
}

int rnic_ib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct rnic_ib_qp *qp = to_iqp(ibqp);
	struct rnic_nic *nic = ib_nic(ibqp->device);
	struct rnic_ucontext *uc = qp->uc;
	struct rnic_qp *rqp;

	xa_erase(&nic->ib_qps, qp->qpn);
	rnic_ib_events_sync(nic);	/* no event work still delivers to it */
	rnic_ib_mmap_remove(qp->db_map);
	rnic_ib_mmap_remove(qp->rq_map);
	rnic_ib_mmap_remove(qp->sq_map);
	rnic_ib_uc_lock_destroy(uc);
	rqp = uc->dead ? NULL : xa_load(&uc->qps, qp->qpn);
	if (rqp)
		rnic_qp_destroy(uc, rqp);
	rnic_uc_unlock(uc);
	return 0;
}

static int rnic_ib_qp_state(enum ib_qp_state s, u32 *out)
{
	switch (s) {
	case IB_QPS_RESET:
		*out = RNIC_QPS_RESET;
		return 0;
	case IB_QPS_INIT:
		*out = RNIC_QPS_INIT;
		return 0;
	case IB_QPS_RTR:
		*out = RNIC_QPS_RTR;
		return 0;
	case IB_QPS_RTS:
		*out = RNIC_QPS_RTS;
		return 0;
	case IB_QPS_ERR:
		*out = RNIC_QPS_ERR;
		return 0;
	default:
		return -EOPNOTSUPP;	/* SQD, SQE */
	}
}

/*
 * The AH's path as the device's QP path entry: the next-hop MAC ib_core resolved for the
 * destination GID (its neighbour entry on rethN, ARP or NDP), the GRH's traffic class and
 * hop limit.
 */
static void rnic_ib_path(const struct rdma_ah_attr *ah, struct rnic_qp_path *path)
{
	const struct ib_global_route *grh = rdma_ah_read_grh(ah);

	path->dest_mac = rnic_ib_mac_to_dev(ah->roce.dmac);
	path->traffic_class = grh->traffic_class;
	path->hop_limit = grh->hop_limit;
	/* The source address: the port's GID the address vector names (rnic_ib_gid.c). */
	path->sgid_index = grh->sgid_index;
	path->flags = RNIC_PATH_FLAG_SGID;
}

/*
 * The AH's destination as the device's: an IPv4-mapped GID is dest_ip; another (IPv6) GID
 * is the path's dest_gid with RNIC_PATH_FLAG_IPV6 and dest_ip 0 (contract 1.9, whose
 * device checks that the source GID is IPv6 too); our own address: loopback (dest_ip 0,
 * no IPv6 flag).
 */
static int rnic_ib_dest(struct rnic_nic *nic, const struct rdma_ah_attr *ah, u32 *ip,
			struct rnic_qp_path *path)
{
	const struct ib_global_route *grh;
	const struct in6_addr *dgid;
	u32 own = ioread32(nic->rd.bar0 + RNIC_REG_IPV4);

	if (!(rdma_ah_get_ah_flags(ah) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(ah);
	dgid = (const struct in6_addr *)grh->dgid.raw;
	rnic_ib_path(ah, path);
	*ip = 0;
	if (rnic_ib_gid_is_own(nic, grh->dgid.raw))
		return 0;
	if (ipv6_addr_v4mapped(dgid)) {
		*ip = get_unaligned_be32(&grh->dgid.raw[12]);
		if (*ip == own)
			*ip = 0;
		return 0;
	}
	if (!nic->qp_path || rnic_version_minor(nic->rd.version) < 9) {
		dev_warn_ratelimited(nic_dev(nic), "MODIFY_QP: destination GID %pI6 is IPv6, which needs a device of contract 1.9\n",
				     grh->dgid.raw);
		return -EINVAL;
	}
	if (ipv6_addr_any(dgid) || ipv6_addr_loopback(dgid) || ipv6_addr_is_multicast(dgid)) {
		dev_warn_ratelimited(nic_dev(nic), "MODIFY_QP: destination GID %pI6 is not a unicast address\n",
				     grh->dgid.raw);
		return -EINVAL;
	}
	memcpy(&path->dest_gid_lo, &grh->dgid.raw[0], sizeof(path->dest_gid_lo));
	memcpy(&path->dest_gid_hi, &grh->dgid.raw[8], sizeof(path->dest_gid_hi));
	path->flags |= RNIC_PATH_FLAG_IPV6;
	return 0;
}

/* The address vector a modify gave, for query_qp to give back (rnic_ib_dest() took it). */
static void rnic_ib_keep_av(struct rnic_ib_qp *qp, const struct rdma_ah_attr *ah)
{
	const struct ib_global_route *grh = rdma_ah_read_grh(ah);

	qp->av.dgid = grh->dgid;
	qp->av.flow_label = grh->flow_label;
	qp->av.sgid_index = grh->sgid_index;
	qp->av.hop_limit = grh->hop_limit;
	qp->av.traffic_class = grh->traffic_class;
	qp->av.sl = rdma_ah_get_sl(ah);
	memcpy(qp->av.dmac, ah->roce.dmac, ETH_ALEN);
	qp->has_av = true;
}

int rnic_ib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		      struct ib_udata *udata)
{
	struct rnic_ib_qp *qp = to_iqp(ibqp);
	struct rnic_nic *nic = ib_nic(ibqp->device);
	struct rnic_ucontext *uc = qp->uc;
	enum ib_qp_state cur, next;
	struct rnic_modify_qp req = {};
	struct rnic_qp_path path = {};
	u32 min_rnr_us = qp->min_rnr_us;
	int ret;

	if (!rnic_ib_udata_in_ok(ibqp->device, udata, "modify_qp"))
		return -EINVAL;

	if (mask & ~IB_QP_ATTR_STANDARD_BITS)
		return -EOPNOTSUPP;
	cur = mask & IB_QP_CUR_STATE ? attr->cur_qp_state : qp->state;
	next = mask & IB_QP_STATE ? attr->qp_state : cur;
	if (!ib_modify_qp_is_ok(cur, next, ibqp->qp_type, mask))
		return -EINVAL;
	ret = rnic_ib_qp_state(next, &req.qp_state);
	if (ret)
		return ret;
	if ((mask & IB_QP_PKEY_INDEX && attr->pkey_index) ||
	    (mask & IB_QP_PORT && attr->port_num != 1))
		return -EINVAL;
	req.qpn = qp->qpn;
	if (mask & IB_QP_ACCESS_FLAGS) {
		/* LOCAL_WRITE means nothing for an RC QP here; REMOTE_ATOMIC before minor 12. */
		req.attr_mask |= RNIC_QP_ATTR_ACCESS;
		req.access = (attr->qp_access_flags & IB_ACCESS_REMOTE_WRITE ? RNIC_ACCESS_REMOTE_WRITE : 0) |
			     (attr->qp_access_flags & IB_ACCESS_REMOTE_READ ? RNIC_ACCESS_REMOTE_READ : 0);
		if (rnic_nic_atomics(nic) && attr->qp_access_flags & IB_ACCESS_REMOTE_ATOMIC)
			req.access |= RNIC_ACCESS_REMOTE_ATOMIC;
		if (rnic_nic_flush(nic))
			req.access |= rnic_ib_flush_access(attr->qp_access_flags);
		/* UC has no READ, atomic or FLUSH operation: those grants mean nothing on it. */
		if (ibqp->qp_type == IB_QPT_UC)
			req.access &= RNIC_ACCESS_REMOTE_WRITE;
	}
	/* A UD QP's Q_Key travels where the device's context holds it (minor 16). */
	if (mask & IB_QP_QKEY) {
		req.attr_mask |= RNIC_QP_ATTR_QKEY;
		req.dest_ip = attr->qkey;
	}
	if (mask & IB_QP_AV) {
		ret = rnic_ib_dest(nic, &attr->ah_attr, &req.dest_ip, &path);
		if (ret)
			return ret;
		req.attr_mask |= RNIC_QP_ATTR_DEST_IP;
	}
	if (mask & IB_QP_PATH_MTU) {
		req.attr_mask |= RNIC_QP_ATTR_PATH_MTU;
		req.path_mtu = ib_mtu_enum_to_int(attr->path_mtu);
	}
	if (mask & IB_QP_DEST_QPN) {
		req.attr_mask |= RNIC_QP_ATTR_DEST_QPN;
		req.dest_qpn = attr->dest_qp_num;
	}
	if (mask & IB_QP_RQ_PSN) {
		req.attr_mask |= RNIC_QP_ATTR_RQ_PSN;
		req.rq_psn = attr->rq_psn;
	}
	if (mask & IB_QP_SQ_PSN) {
		req.attr_mask |= RNIC_QP_ATTR_SQ_PSN;
		req.sq_psn = attr->sq_psn;
	}
	if (mask & IB_QP_RETRY_CNT) {
		req.attr_mask |= RNIC_QP_ATTR_RETRY_CNT;
		req.retry_cnt = attr->retry_cnt;
	}
	if (mask & IB_QP_TIMEOUT) {
		req.attr_mask |= RNIC_QP_ATTR_TIMEOUT;
		req.timeout = attr->timeout;
	}
	/* IB gives the RNR timer at INIT->RTR and the retry count at RTR->RTS; we take both. */
	if (mask & IB_QP_MIN_RNR_TIMER)
		min_rnr_us = rnic_ib_rnr_us[attr->min_rnr_timer & 31];
	if (mask & IB_QP_RNR_RETRY) {
		req.attr_mask |= RNIC_QP_ATTR_RNR;
		req.rnr_retry = attr->rnr_retry;
		req.rnr_timer_us = min_rnr_us;
	}
	/*
	 * READs and atomics outstanding (minor 12; before, the engine kept 16 either way). IB's 0
	 * (no READ or atomic at all) is taken as 1: the device counts from 1.
	 */
	if (rnic_nic_atomics(nic) && mask & IB_QP_MAX_QP_RD_ATOMIC) {
		req.attr_mask |= RNIC_QP_ATTR_MAX_RD_ATOMIC;
		req.rd_atomic |= clamp_t(u32, attr->max_rd_atomic, 1, 16);
	}
	if (rnic_nic_atomics(nic) && mask & IB_QP_MAX_DEST_RD_ATOMIC) {
		req.attr_mask |= RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC;
		req.rd_atomic |= clamp_t(u32, attr->max_dest_rd_atomic, 1, 16) << 8;
	}

	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	ret = rnic_modify_qp(uc, &req, &path);
	rnic_uc_unlock(uc);
	if (ret)
		return ret;
	qp->state = next;
	qp->min_rnr_us = min_rnr_us;
	if (mask & IB_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = attr->min_rnr_timer & 31;
	if (mask & IB_QP_AV)
		rnic_ib_keep_av(qp, &attr->ah_attr);
	return 0;
}

static enum ib_qp_state rnic_ib_from_state(u32 s)
{
	switch (s) {
	case RNIC_QPS_INIT:
		return IB_QPS_INIT;
	case RNIC_QPS_RTR:
		return IB_QPS_RTR;
	case RNIC_QPS_RTS:
		return IB_QPS_RTS;
	case RNIC_QPS_ERR:
		return IB_QPS_ERR;
	default:
		return IB_QPS_RESET;
	}
}

int rnic_ib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		     struct ib_qp_init_attr *init)
{
	struct rnic_ib_qp *qp = to_iqp(ibqp);
	struct rnic_ucontext *uc = qp->uc;
	struct rnic_query_qp q = { .qpn = qp->qpn };
	struct rnic_qp *rqp;
	int ret;

	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	ret = rnic_query_qp(uc, &q);
	rqp = xa_load(&uc->qps, qp->qpn);
	if (!ret && rqp) {
		memset(attr, 0, sizeof(*attr));
		memset(init, 0, sizeof(*init));
		attr->qp_state = rnic_ib_from_state(q.qp_state);
		attr->cur_qp_state = attr->qp_state;
		attr->path_mtu = ib_mtu_int_to_enum(1 << rqp->path_mtu_log2);
		attr->qp_access_flags = (rqp->access & RNIC_ACCESS_REMOTE_WRITE ? IB_ACCESS_REMOTE_WRITE : 0) |
					(rqp->access & RNIC_ACCESS_REMOTE_READ ? IB_ACCESS_REMOTE_READ : 0) |
					(rqp->access & RNIC_ACCESS_REMOTE_ATOMIC ? IB_ACCESS_REMOTE_ATOMIC : 0) |
					(rqp->access & RNIC_ACCESS_FLUSH_GLOBAL ? IB_ACCESS_FLUSH_GLOBAL : 0) |
					(rqp->access & RNIC_ACCESS_FLUSH_PERSISTENT ?
					 IB_ACCESS_FLUSH_PERSISTENT : 0);
		attr->max_rd_atomic = rqp->max_rd_atomic;
		attr->max_dest_rd_atomic = rqp->max_dest_rd_atomic;
		attr->dest_qp_num = rqp->dest_qpn;
		attr->qkey = rqp->qkey;
		attr->rq_psn = rqp->rq_psn;
		attr->sq_psn = rqp->sq_psn;
		attr->retry_cnt = rqp->retry_cnt;
		attr->rnr_retry = rqp->rnr_retry;
		attr->timeout = rqp->timeout;
		attr->port_num = 1;
		attr->min_rnr_timer = qp->min_rnr_timer;
		if (qp->has_av) {
			attr->ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
			rdma_ah_set_port_num(&attr->ah_attr, 1);
			rdma_ah_set_sl(&attr->ah_attr, qp->av.sl);
			rdma_ah_set_grh(&attr->ah_attr, &qp->av.dgid, qp->av.flow_label,
					qp->av.sgid_index, qp->av.hop_limit, qp->av.traffic_class);
			memcpy(attr->ah_attr.roce.dmac, qp->av.dmac, ETH_ALEN);
		}
		attr->cap.max_send_wr = 1U << rqp->sq.log_size;
		attr->cap.max_recv_wr = rqp->srq ? 0 : 1U << rqp->rq.log_size;
		attr->cap.max_send_sge = rqp->max_send_sge;
		attr->cap.max_recv_sge = rqp->max_recv_sge;
		attr->cap.max_inline_data = rqp->max_inline;
		init->qp_type = ibqp->qp_type;
		init->cap = attr->cap;
	} else if (!ret) {
		ret = -ENOENT;
	}
	rnic_uc_unlock(uc);
	return ret;
}

/*
 * The provider posts through the mmap'd rings and the doorbell page; it calls POST_SEND /
 * POST_RECV (or POST_SRQ_RECV, rnic_ib_srq.c) with no work requests only when the device's
 * event index asks for the MMIO doorbell (docs/verbs.md §3.1). Ring it for QP number @qpn
 * (an SRQ's too) with the producer index the page holds.
 */
void rnic_ib_ring_db(struct rnic_nic *nic, u32 qpn, bool recv)
{
	void __iomem *page = nic->dbp + rnic_dbp_qp(qpn);
	u16 pi = readl(page + rnic_dbp_pi(recv));

	writel(rnic_db_value(qpn, pi), nic->rd.bar0 + (recv ? RQ_DB_IDX : WQE_DB_IDX));
}

static int rnic_ib_kick(struct ib_qp *ibqp, bool recv)
{
	rnic_ib_ring_db(ib_nic(ibqp->device), to_iqp(ibqp)->qpn, recv);
	return 0;
}

int rnic_ib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		      const struct ib_send_wr **bad_wr)
{
	if (wr) {
		*bad_wr = wr;	/* user QPs post through their ring */
		return -EINVAL;
	}
	return rnic_ib_kick(ibqp, false);
}

int rnic_ib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr)
{
	if (wr) {
		*bad_wr = wr;
		return -EINVAL;
	}
	return rnic_ib_kick(ibqp, true);
}

/* ---- MRs ---- */

/*
 * IB access flags as the device's; REMOTE_ATOMIC is taken (and means nothing) before 1.12.
 * FLUSH to global visibility from 1.14 (ib_core has already refused it, and persistence,
 * on a device that does not report them).
 */
static int rnic_ib_mr_access(struct ib_device *ibdev, int access, u32 *out)
{
	int flush = rnic_nic_flush(ib_nic(ibdev)) ? IB_ACCESS_FLUSH_GLOBAL : 0;

	if (access & ~(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
		       IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_RELAXED_ORDERING | flush))
		return -EOPNOTSUPP;
	*out = (access & IB_ACCESS_LOCAL_WRITE ? RNIC_ACCESS_LOCAL_WRITE : 0) |
	       (access & IB_ACCESS_REMOTE_WRITE ? RNIC_ACCESS_REMOTE_WRITE : 0) |
	       (access & IB_ACCESS_REMOTE_READ ? RNIC_ACCESS_REMOTE_READ : 0);
	if (rnic_nic_atomics(ib_nic(ibdev)) && access & IB_ACCESS_REMOTE_ATOMIC)
		*out |= RNIC_ACCESS_REMOTE_ATOMIC;
	*out |= rnic_ib_flush_access(access & flush);
	return 0;
}

/*
 * One MR through rnic_reg_mr() (@fd < 0: user memory at @addr) or rnic_reg_mr_dmabuf()
 * (@fd: a GPU's dma-buf, @offset in it): the request either ioctl would fill, strict P2P.
 */
static struct ib_mr *rnic_ib_reg_mr(struct ib_pd *ibpd, u64 addr, u64 length, int access,
				    int fd, u64 offset, struct ib_udata *udata)
{
	struct rnic_ucontext *uc;
	struct rnic_reg_mr req = {};
	struct rnic_ib_mr *mr;
	int ret;

	ret = rnic_ib_mr_access(ibpd->device, access, &req.access);
	if (ret)
		return ERR_PTR(ret);
	if (!rnic_ib_udata_in_ok(ibpd->device, udata, "reg_mr"))
		return ERR_PTR(-EINVAL);
	uc = rdma_udata_to_drv_context(udata, struct rnic_ib_ucontext, ibuc)->uc;
	req.addr = addr;
	req.length = length;
	req.pd = ib_pdn(ibpd);
	req.flags = RNIC_MR_FLAG_STRICT_P2P;

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	/* Both take the context's lock themselves. */
	ret = fd < 0 ? rnic_reg_mr(uc, &req) : rnic_reg_mr_dmabuf(uc, &req, fd, offset);
	if (ret) {
		kfree(mr);
		return ERR_PTR(ret);
	}
	mr->uc = uc;
	mr->index = req.index;
	mr->ibmr.lkey = req.lkey;
	mr->ibmr.rkey = req.rkey;
	return &mr->ibmr;
}

struct ib_mr *rnic_ib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length, u64 virt,
				  int access, struct ib_dmah *dmah, struct ib_udata *udata)
{
	/* The device's iova is the user address. */
	if (!udata || dmah || virt != start)
		return ERR_PTR(-EOPNOTSUPP);
	return rnic_ib_reg_mr(ibpd, start, length, access, -1, 0, udata);
}

/* GPU memory as a dma-buf (rnic_gpu_dmabuf.c): the MR's iova is @virt_addr. */
struct ib_mr *rnic_ib_reg_user_mr_dmabuf(struct ib_pd *ibpd, u64 offset, u64 length,
					 u64 virt_addr, int fd, int access,
					 struct ib_dmah *dmah, struct uverbs_attr_bundle *attrs)
{
	if (!attrs || dmah || fd < 0)
		return ERR_PTR(fd < 0 ? -EBADF : -EOPNOTSUPP);
	return rnic_ib_reg_mr(ibpd, virt_addr, length, access, fd, offset, &attrs->driver_udata);
}

/*
 * ibv_rereg_mr: in place (NULL: ib_core keeps this ib_mr and updates its PD and iova), the
 * keys unchanged (rnic_mr_rereg.c). The iova stays the user address.
 */
struct ib_mr *rnic_ib_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start, u64 length,
				    u64 virt, int access, struct ib_pd *ibpd,
				    struct ib_udata *udata)
{
	struct rnic_ib_mr *mr = container_of(ibmr, struct rnic_ib_mr, ibmr);
	struct rnic_reg_mr req = {};
	u32 what = 0;
	int ret;

	if (flags & ~(IB_MR_REREG_TRANS | IB_MR_REREG_PD | IB_MR_REREG_ACCESS))
		return ERR_PTR(-EOPNOTSUPP);
	if (!rnic_ib_udata_in_ok(ibmr->device, udata, "rereg_mr"))
		return ERR_PTR(-EINVAL);
	if (flags & IB_MR_REREG_TRANS) {
		if (virt != start)
			return ERR_PTR(-EOPNOTSUPP);
		req.addr = start;
		req.length = length;
		what |= RNIC_REREG_TRANS;
	}
	if (flags & IB_MR_REREG_PD) {
		req.pd = ib_pdn(ibpd);
		what |= RNIC_REREG_PD;
	}
	if (flags & IB_MR_REREG_ACCESS) {
		ret = rnic_ib_mr_access(ibmr->device, access, &req.access);
		if (ret)
			return ERR_PTR(ret);
		what |= RNIC_REREG_ACCESS;
	}
	ret = rnic_mr_rereg(mr->uc, mr->index, what, &req);
	return ret ? ERR_PTR(ret) : NULL;
}

int rnic_ib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct rnic_ib_mr *mr = container_of(ibmr, struct rnic_ib_mr, ibmr);
	struct rnic_ucontext *uc = mr->uc;

	rnic_ib_uc_lock_destroy(uc);
	if (!uc->dead)
		rnic_dereg_mr(uc, mr->index);	/* -ENOENT: revoked with its GPU already */
	rnic_uc_unlock(uc);
	kfree(mr);
	return 0;
}
