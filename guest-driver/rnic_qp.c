// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: queue pairs (docs/verbs.md §3-4): creation with SQ and RQ rings
 * in DMA-coherent memory, the state machine MODIFY_QP drives (the attributes each edge
 * takes, the remote attributes of docs/fabric.md), QUERY_QP and destruction. Posting work
 * requests is in rnic_post.c, completions in rnic_poll.c.
 *
 * A ring is at most RNIC_MAX_RING_BYTES (QUERY_DEVICE max_ring_bytes): a bigger request
 * fails with -EINVAL before anything is allocated. Destruction always tells the device
 * (DESTROY_QP), whatever state the driver last saw, and frees the rings only when the
 * device let go of them.
 */
#include <linux/bitmap.h>
#include <linux/log2.h>
#include <linux/slab.h>

#include "rnic_verbs.h"

#define RNIC_WQE_HDR_SIZE	sizeof(struct rnic_wqe)

static u32 rnic_stride_log(u32 bytes)
{
	if (bytes <= 64)
		return 6;
	if (bytes <= 128)
		return 7;
	return 8;
}

static size_t rnic_wq_bytes(u32 entries, u32 bytes)
{
	return (size_t)1 << (order_base_2(entries) + rnic_stride_log(bytes));
}

int rnic_wq_alloc(struct rnic_nic *nic, struct rnic_wq *wq, u32 entries, u32 bytes)
{
	wq->log_size = order_base_2(entries);
	wq->log_stride = rnic_stride_log(bytes);
	wq->ring_bytes = rnic_wq_bytes(entries, bytes);
	wq->ring = rnic_ring_alloc(nic, wq->ring_bytes, &wq->ring_dma);
	wq->wr_id = kvcalloc(1U << wq->log_size, sizeof(*wq->wr_id), GFP_KERNEL_ACCOUNT);
	wq->busy = bitmap_zalloc(1U << wq->log_size, GFP_KERNEL_ACCOUNT);
	if (!wq->ring || !wq->wr_id || !wq->busy) {
		dev_warn_ratelimited(nic_dev(nic), "CREATE_QP: cannot allocate a ring of %u x %u bytes\n",
				     1U << wq->log_size, 1U << wq->log_stride);
		return -ENOMEM;
	}
	return 0;
}

void rnic_wq_free(struct rnic_nic *nic, struct rnic_wq *wq, bool device_let_go)
{
	rnic_ring_free(nic, wq->ring, wq->ring_bytes, wq->ring_dma, device_let_go);
	kvfree(wq->wr_id);
	bitmap_free(wq->busy);
}

/* Back to an empty queue (QP to RESET: the device forgets its indices too). */
static void rnic_wq_reset(struct rnic_wq *wq)
{
	if (!wq->ring)
		return;		/* the RQ of a QP on an SRQ */
	wq->pi = 0;
	wq->ci = 0;
	bitmap_zero(wq->busy, 1U << wq->log_size);
	memset(wq->ring, 0, wq->ring_bytes);
}

static void rnic_qp_free(struct rnic_nic *nic, struct rnic_qp *qp, bool device_let_go)
{
	rnic_wq_free(nic, &qp->rq, device_let_go);
	rnic_wq_free(nic, &qp->sq, device_let_go);
	kfree(qp);
}

/*
 * CREATE_QP. @srq: the SRQ the QP receives from (minor 15; ib_core contexts only), or NULL:
 * then the QP has no RQ ring of its own and req's receive sizes are not looked at.
 */
int rnic_create_qp(struct rnic_ucontext *uc, struct rnic_create_qp *req, struct rnic_srq *srq)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	u32 max_wr = 1U << nic->max_ring_log2;
	struct rnic_cq *scq, *rcq;
	struct rnic_pd *pd;
	struct rnic_qp *qp;
	u32 send_head;
	int id, ret;

	if (req->qp_type != RNIC_QP_TYPE_RC &&
	    (req->qp_type != RNIC_QP_TYPE_UC || !rnic_nic_uc(nic)) &&
	    (req->qp_type != RNIC_QP_TYPE_UD || !rnic_nic_ud(nic)))
		return -EINVAL;
	if (srq && (req->qp_type != RNIC_QP_TYPE_RC || !rnic_nic_srq(nic)))
		return -EINVAL;	/* the device attaches RC QPs only */
	if (srq) {
		req->max_recv_wr = 1;	/* not used: keeps the checks below simple */
		req->max_recv_sge = 1;
	}
	pd = xa_load(&uc->pds, req->pd);
	scq = xa_load(&uc->cqs, req->send_cqn);
	rcq = xa_load(&uc->cqs, req->recv_cqn);
	if (!pd || !scq || !rcq) {
		dev_warn_ratelimited(dev, "CREATE_QP: unknown %s %u\n",
				     !pd ? "PD" : "CQ",
				     !pd ? req->pd : !scq ? req->send_cqn : req->recv_cqn);
		return -ENOENT;
	}
	if (req->max_send_wr == 0 || req->max_send_wr > max_wr ||
	    req->max_recv_wr == 0 || req->max_recv_wr > max_wr ||
	    req->max_send_sge > RNIC_UAPI_MAX_SGE ||
	    req->max_recv_sge == 0 || req->max_recv_sge > RNIC_UAPI_MAX_SGE ||
	    req->max_inline > RNIC_UAPI_MAX_INLINE) {
		dev_warn_ratelimited(dev, "CREATE_QP: bad sizes: send_wr %u recv_wr %u (1..%u), send_sge %u recv_sge %u (recv 1..%u), inline %u (max %u)\n",
				     req->max_send_wr, req->max_recv_wr, max_wr,
				     req->max_send_sge, req->max_recv_sge, RNIC_UAPI_MAX_SGE,
				     req->max_inline, RNIC_UAPI_MAX_INLINE);
		return -EINVAL;
	}

	/* A UD send WQE carries its address vector before its SGEs (minor 16). */
	send_head = RNIC_WQE_HDR_SIZE + (req->qp_type == RNIC_QP_TYPE_UD ? sizeof(struct rnic_ud_av) : 0);
	if (send_head + max_t(u32, req->max_send_sge * sizeof(struct rnic_sge), req->max_inline) > 256) {
		dev_warn_ratelimited(dev, "CREATE_QP: a UD send WQE of %u SGEs / %u inline bytes is over 256 bytes\n",
				     req->max_send_sge, req->max_inline);
		return -EINVAL;
	}
	if (rnic_wq_bytes(req->max_send_wr, send_head +
			  max_t(u32, req->max_send_sge * sizeof(struct rnic_sge), req->max_inline)) >
	    RNIC_MAX_RING_BYTES ||
	    rnic_wq_bytes(req->max_recv_wr, RNIC_WQE_HDR_SIZE +
			  req->max_recv_sge * sizeof(struct rnic_sge)) > RNIC_MAX_RING_BYTES) {
		dev_warn_ratelimited(dev, "CREATE_QP: send_wr %u x %u SGEs / %u inline, recv_wr %u x %u SGEs: a ring over %u bytes\n",
				     req->max_send_wr, req->max_send_sge, req->max_inline,
				     req->max_recv_wr, req->max_recv_sge, RNIC_MAX_RING_BYTES);
		return -EINVAL;
	}

	qp = kzalloc(sizeof(*qp), GFP_KERNEL_ACCOUNT);
	if (!qp)
		return -ENOMEM;
	ret = rnic_wq_alloc(nic, &qp->sq, req->max_send_wr,
			    send_head + max_t(u32, req->max_send_sge * sizeof(struct rnic_sge),
					      req->max_inline));
	if (ret)
		goto err_free;
	if (!srq) {
		ret = rnic_wq_alloc(nic, &qp->rq, req->max_recv_wr,
				    RNIC_WQE_HDR_SIZE + req->max_recv_sge * sizeof(struct rnic_sge));
		if (ret)
			goto err_free;
	}

	/*
	 * QPNs 0 and 1 are the special QPs of the IBTA (QP0, the subnet manager's, which RoCE
	 * does not have; QP1, the GSI): a peer's GSI traffic goes to QPN 1, so no RC QP may
	 * have it.
	 */
	id = ida_alloc_range(&nic->qp_ida, RNIC_FIRST_QPN, nic->max_qp - 1, GFP_KERNEL);
	if (id < 0) {
		dev_warn_ratelimited(dev, "CREATE_QP: all %u QPs in use\n", nic->max_qp - RNIC_FIRST_QPN);
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_free;
	}
	qp->qpn = id;
	qp->qp_type = req->qp_type;
	rnic_num_start(nic, RNIC_NUM_QP, qp->qpn);
	qp->gen = ++nic->qp_gen[qp->qpn];	/* the IDA makes this slot ours */
	qp->state = RNIC_QPS_RESET;
	qp->pd = pd;
	qp->send_cq = scq;
	qp->recv_cq = rcq;
	/* What the stride allows, which may be more than asked for. */
	qp->max_send_sge = min_t(u32, RNIC_UAPI_MAX_SGE,
				 ((1U << qp->sq.log_stride) - send_head) / sizeof(struct rnic_sge));
	qp->max_inline = (1U << qp->sq.log_stride) - send_head;
	qp->max_recv_sge = srq ? srq->max_sge :
			   min_t(u32, RNIC_UAPI_MAX_SGE,
				 ((1U << qp->rq.log_stride) - RNIC_WQE_HDR_SIZE) / sizeof(struct rnic_sge));
	qp->srq = srq;
	qp->rnr_retry = 7;
	qp->rnr_timer_us = 10;
	qp->path_mtu_log2 = RNIC_PATH_MTU_MAX_LOG2;
	qp->retry_cnt = RNIC_QP_DEFAULT_RETRY_CNT;
	qp->timeout = RNIC_QP_DEFAULT_TIMEOUT;
	qp->max_rd_atomic = 16;
	qp->max_dest_rd_atomic = 16;
	/*
	 * The path entry of the QP that had this number before is not ours: the device reads
	 * it at every RTR, also with dest_ip 0 (an IPv6 path, contract 1.9).
	 */
	if (nic->qp_path) {
		mutex_lock(&nic->cmd_lock);
		memset(&nic->qp_path[qp->qpn], 0, sizeof(*nic->qp_path));
		mutex_unlock(&nic->cmd_lock);
	}

	ret = xa_insert(&uc->qps, qp->qpn, qp, GFP_KERNEL);
	if (ret)
		goto err_ida;

	pd->users++;
	scq->users++;
	rcq->users++;
	if (srq)
		srq->users++;

	req->qpn = qp->qpn;
	req->max_send_wr = 1U << qp->sq.log_size;
	req->max_recv_wr = srq ? 0 : 1U << qp->rq.log_size;
	req->max_send_sge = qp->max_send_sge;
	req->max_recv_sge = qp->max_recv_sge;
	req->max_inline = qp->max_inline;
	return 0;

err_ida:
	rnic_num_put(nic, RNIC_NUM_QP, qp->qpn);
err_free:
	rnic_qp_free(nic, qp, true);
	return ret;
}

/*
 * Destroys a QP at the device, whatever state the driver last saw (it can be stale after
 * a failed MODIFY_QP). The rings are freed only when the device let go of them.
 */
void rnic_qp_destroy(struct rnic_ucontext *uc, struct rnic_qp *qp)
{
	struct rnic_nic *nic = uc->nic;
	bool let_go = rnic_cmd_release(nic, RNIC_CMD_DESTROY_QP, qp->qpn);

	xa_erase(&uc->qps, qp->qpn);
	if (let_go)
		rnic_num_put(nic, RNIC_NUM_QP, qp->qpn);	/* else the device still has it */
	qp->pd->users--;
	qp->send_cq->users--;
	qp->recv_cq->users--;
	if (qp->srq)
		qp->srq->users--;
	rnic_qp_free(nic, qp, let_go);
}

int rnic_destroy_qp(struct rnic_ucontext *uc, u32 qpn)
{
	struct rnic_qp *qp = xa_load(&uc->qps, qpn);

	if (!qp)
		return -ENOENT;
	rnic_qp_destroy(uc, qp);
	return 0;
}

static bool rnic_qps_valid(u32 s)
{
	return s == RNIC_QPS_RESET || s == RNIC_QPS_INIT || s == RNIC_QPS_RTR ||
	       s == RNIC_QPS_RTS || s == RNIC_QPS_ERR;
}

/* The attributes a transition accepts (mask) and needs (*required); false: illegal edge. */
static bool rnic_qp_edge(u32 cur, u32 next, bool ud, u32 *allowed, u32 *required)
{
	*required = 0;
	*allowed = 0;
	if (next == RNIC_QPS_ERR || next == RNIC_QPS_RESET)
		return true;
	/* A UD QP (minor 16) has no destination and no remote access: its Q_Key, PSN. */
	if (ud) {
		*allowed = RNIC_QP_ATTR_QKEY | (cur == RNIC_QPS_RTR ? RNIC_QP_ATTR_SQ_PSN : 0);
		return (cur == RNIC_QPS_RESET && next == RNIC_QPS_INIT) ||
		       (cur == next && (cur == RNIC_QPS_INIT || cur == RNIC_QPS_RTS)) ||
		       (cur == RNIC_QPS_INIT && next == RNIC_QPS_RTR) ||
		       (cur == RNIC_QPS_RTR && next == RNIC_QPS_RTS);
	}
	if (cur == RNIC_QPS_RESET && next == RNIC_QPS_INIT) {
		*allowed = RNIC_QP_ATTR_ACCESS | RNIC_QP_ATTR_RNR;
		return true;
	}
	if ((cur == RNIC_QPS_INIT && next == RNIC_QPS_INIT) ||
	    (cur == RNIC_QPS_RTS && next == RNIC_QPS_RTS)) {
		*allowed = RNIC_QP_ATTR_ACCESS;
		return true;
	}
	if (cur == RNIC_QPS_INIT && next == RNIC_QPS_RTR) {
		*allowed = RNIC_QP_ATTR_DEST_QPN | RNIC_QP_ATTR_DEST_IP | RNIC_QP_ATTR_RQ_PSN |
			   RNIC_QP_ATTR_PATH_MTU | RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC;
		*required = RNIC_QP_ATTR_DEST_QPN;
		return true;
	}
	if (cur == RNIC_QPS_RTR && next == RNIC_QPS_RTS) {
		*allowed = RNIC_QP_ATTR_RNR | RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_RETRY_CNT |
			   RNIC_QP_ATTR_TIMEOUT | RNIC_QP_ATTR_MAX_RD_ATOMIC;
		return true;
	}
	return false;
}

/* The attributes MODIFY_QP writes into the QP context (the driver's copy, or the new one). */
struct rnic_qp_attrs {
	u8 access, rnr_retry;
	u32 rnr_timer_us;
	u32 dest_qpn;
	u32 dest_ip;
	u32 rq_psn, sq_psn;
	u8 path_mtu_log2, retry_cnt, timeout;
	u8 max_rd_atomic, max_dest_rd_atomic;
	u32 qkey;
};

static void rnic_qp_get_attrs(const struct rnic_qp *qp, struct rnic_qp_attrs *a)
{
	a->access = qp->access;
	a->rnr_retry = qp->rnr_retry;
	a->rnr_timer_us = qp->rnr_timer_us;
	a->dest_qpn = qp->dest_qpn;
	a->dest_ip = qp->dest_ip;
	a->rq_psn = qp->rq_psn;
	a->sq_psn = qp->sq_psn;
	a->path_mtu_log2 = qp->path_mtu_log2;
	a->retry_cnt = qp->retry_cnt;
	a->timeout = qp->timeout;
	a->max_rd_atomic = qp->max_rd_atomic;
	a->max_dest_rd_atomic = qp->max_dest_rd_atomic;
	a->qkey = qp->qkey;
}

static void rnic_qp_set_attrs(struct rnic_qp *qp, const struct rnic_qp_attrs *a)
{
	qp->access = a->access;
	qp->rnr_retry = a->rnr_retry;
	qp->rnr_timer_us = a->rnr_timer_us;
	qp->dest_qpn = a->dest_qpn;
	qp->dest_ip = a->dest_ip;
	qp->rq_psn = a->rq_psn;
	qp->sq_psn = a->sq_psn;
	qp->path_mtu_log2 = a->path_mtu_log2;
	qp->retry_cnt = a->retry_cnt;
	qp->timeout = a->timeout;
	qp->max_rd_atomic = a->max_rd_atomic;
	qp->max_dest_rd_atomic = a->max_dest_rd_atomic;
	qp->qkey = a->qkey;
}

static void rnic_qp_fill_ctx(struct rnic_qp *qp, struct rnic_qp_ctx *ctx, u32 state,
			     const struct rnic_qp_attrs *a)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->state = state;
	ctx->sq_log_size = qp->sq.log_size;
	ctx->rq_log_size = qp->rq.log_size;
	ctx->sq_log_stride = qp->sq.log_stride;
	ctx->rq_log_stride = qp->rq.log_stride;
	ctx->access = a->access;
	ctx->rnr_retry = a->rnr_retry;
	ctx->pd = qp->pd->pdn;
	ctx->send_cqn = qp->send_cq->cqn;
	ctx->recv_cqn = qp->recv_cq->cqn;
	/* Bits [31:24]: the service, which the device takes at RESET -> INIT (minor 13). */
	ctx->dest_qpn = a->dest_qpn | qp->qp_type << 24;
	ctx->rnr_timer_us = a->rnr_timer_us;
	/* A UD QP's context holds its Q_Key there (minor 16). */
	ctx->dest_ip = qp->qp_type == RNIC_QP_TYPE_UD ? a->qkey : a->dest_ip;
	ctx->sq_addr = qp->sq.ring_dma;
	ctx->rq_addr = qp->rq.ring_dma;
	if (qp->srq) {
		/* No RQ: rq_log_stride 0 says so, rq_addr names the SRQ (minor 15). */
		ctx->rq_log_size = 0;
		ctx->rq_log_stride = 0;
		ctx->rq_addr = qp->srq->qpn;
	}
	ctx->sq_psn = a->sq_psn;
	ctx->rq_psn = a->rq_psn;
	ctx->path_mtu = a->path_mtu_log2;
	ctx->retry_cnt = a->retry_cnt;
	ctx->timeout = a->timeout;
	/* A nibble of 0 is the device's 16. */
	ctx->rd_atomic = (a->max_rd_atomic & 0xf) | (a->max_dest_rd_atomic & 0xf) << 4;
}

/*
 * A unicast IPv4 destination, or 0 (loopback): not 0.0.0.0/8 otherwise, not multicast
 * (224.0.0.0/4) or class E and broadcast (240.0.0.0/4).
 */
static bool rnic_dest_ip_valid(u32 ip)
{
	return !ip || ((ip >> 24) != 0 && (ip >> 28) < 0xe);
}

/* Checks the remote attributes a modify names (docs/fabric.md) into *a; -EINVAL if bad. */
static int rnic_qp_check_remote(struct rnic_nic *nic, const struct rnic_qp *qp,
				const struct rnic_modify_qp *req, struct rnic_qp_attrs *a)
{
	struct device *dev = nic_dev(nic);

	if (req->attr_mask & RNIC_QP_ATTR_DEST_IP) {
		if (!rnic_dest_ip_valid(req->dest_ip)) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: dest_ip %pI4h is not a unicast IPv4 address (or 0 for loopback)\n",
					     qp->qpn, &req->dest_ip);
			return -EINVAL;
		}
		a->dest_ip = req->dest_ip;
	}
	if (req->attr_mask & RNIC_QP_ATTR_RQ_PSN) {
		if (req->rq_psn & ~RNIC_PSN_MASK) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: rq_psn 0x%x is not a 24-bit PSN\n",
					     qp->qpn, req->rq_psn);
			return -EINVAL;
		}
		a->rq_psn = req->rq_psn;
	}
	if (req->attr_mask & RNIC_QP_ATTR_PATH_MTU) {
		if (!is_power_of_2(req->path_mtu) ||
		    req->path_mtu < (1U << RNIC_PATH_MTU_MIN_LOG2) ||
		    req->path_mtu > (1U << RNIC_PATH_MTU_MAX_LOG2)) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: path_mtu %u (256, 512, 1024, 2048 or 4096)\n",
					     qp->qpn, req->path_mtu);
			return -EINVAL;
		}
		a->path_mtu_log2 = ilog2(req->path_mtu);
	}
	if (req->attr_mask & RNIC_QP_ATTR_SQ_PSN) {
		if (req->sq_psn & ~RNIC_PSN_MASK) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: sq_psn 0x%x is not a 24-bit PSN\n",
					     qp->qpn, req->sq_psn);
			return -EINVAL;
		}
		a->sq_psn = req->sq_psn;
	}
	if (req->attr_mask & RNIC_QP_ATTR_RETRY_CNT) {
		if (req->retry_cnt > RNIC_QP_MAX_RETRY_CNT) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: retry_cnt %u (0..%u)\n",
					     qp->qpn, req->retry_cnt, RNIC_QP_MAX_RETRY_CNT);
			return -EINVAL;
		}
		a->retry_cnt = req->retry_cnt;
	}
	if (req->attr_mask & RNIC_QP_ATTR_TIMEOUT) {
		if (req->timeout > RNIC_QP_MAX_TIMEOUT) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: timeout %u (0..%u)\n",
					     qp->qpn, req->timeout, RNIC_QP_MAX_TIMEOUT);
			return -EINVAL;
		}
		a->timeout = req->timeout;
	}
	return 0;
}

/*
 * MODIFY_QP. @path: the address vector ib_core resolved (next-hop MAC, traffic class, hop
 * limit, source GID; an IPv6 destination GID with RNIC_PATH_FLAG_IPV6, dest_ip then 0),
 * written to the QP's path entry with an RTR that names dest_ip; NULL
 * (the ioctl interface) leaves the entry zero: the peer is an rnic-emu port, whose MAC
 * follows from dest_ip, and the source is the port's fabric address.
 */
int rnic_modify_qp(struct rnic_ucontext *uc, const struct rnic_modify_qp *req,
		   const struct rnic_qp_path *path)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	u32 allowed, required, hw_state;
	struct rnic_qp_attrs a;
	struct rnic_qp_ctx *ctx;
	struct rnic_qp *qp;
	int ret;

	/* rd_atomic is read only with its attribute bits (it was padding, 0, before). */
	if (req->rd_atomic &&
	    !(req->attr_mask & (RNIC_QP_ATTR_MAX_RD_ATOMIC | RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC)))
		return -EINVAL;
	qp = xa_load(&uc->qps, req->qpn);
	if (!qp)
		return -ENOENT;
	if (!rnic_qps_valid(req->qp_state)) {
		dev_warn_ratelimited(dev, "MODIFY_QP %u: unknown state %u\n", qp->qpn, req->qp_state);
		return -EINVAL;
	}
	if (!rnic_qp_edge(qp->state, req->qp_state, qp->qp_type == RNIC_QP_TYPE_UD, &allowed, &required)) {
		dev_warn_ratelimited(dev, "MODIFY_QP %u: illegal transition %u -> %u\n",
				     qp->qpn, qp->state, req->qp_state);
		return -EINVAL;
	}
	if (req->attr_mask & ~allowed || (req->attr_mask & required) != required) {
		dev_warn_ratelimited(dev, "MODIFY_QP %u: %u -> %u with attribute mask 0x%x (allowed 0x%x, required 0x%x)\n",
				     qp->qpn, qp->state, req->qp_state, req->attr_mask,
				     allowed, required);
		return -EINVAL;
	}

	/* Validate everything, then commit: nothing changes unless the device accepts. */
	rnic_qp_get_attrs(qp, &a);
	if (req->attr_mask & RNIC_QP_ATTR_ACCESS) {
		u32 known = RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ |
			    (rnic_nic_atomics(nic) ? RNIC_ACCESS_REMOTE_ATOMIC : 0) |
			    (rnic_nic_flush(nic) ? RNIC_ACCESS_FLUSH_GLOBAL |
			     RNIC_ACCESS_FLUSH_PERSISTENT : 0);

		if (req->access & ~known) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: access 0x%x (QPs take 0x%x)\n",
					     qp->qpn, req->access, known);
			return -EINVAL;
		}
		a.access = req->access;
	}
	if (req->attr_mask & (RNIC_QP_ATTR_MAX_RD_ATOMIC | RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC)) {
		u32 init = req->rd_atomic & 0xff, dest = req->rd_atomic >> 8;
		bool bad_init = req->attr_mask & RNIC_QP_ATTR_MAX_RD_ATOMIC && (!init || init > 16);
		bool bad_dest = req->attr_mask & RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC && (!dest || dest > 16);

		if (!rnic_nic_atomics(nic) || bad_init || bad_dest || req->rd_atomic >> 16) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: rd_atomic 0x%x (1..16 each; contract minor 12)\n",
					     qp->qpn, req->rd_atomic);
			return -EINVAL;
		}
		if (req->attr_mask & RNIC_QP_ATTR_MAX_RD_ATOMIC)
			a.max_rd_atomic = init;
		if (req->attr_mask & RNIC_QP_ATTR_MAX_DEST_RD_ATOMIC)
			a.max_dest_rd_atomic = dest;
	}
	if (req->attr_mask & RNIC_QP_ATTR_RNR) {
		if (req->rnr_retry > 7 || req->rnr_timer_us > RNIC_RNR_TIMER_MAX_US) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: rnr_retry %u (0..7) rnr_timer_us %u (max %u)\n",
					     qp->qpn, req->rnr_retry, req->rnr_timer_us,
					     RNIC_RNR_TIMER_MAX_US);
			return -EINVAL;
		}
		a.rnr_retry = req->rnr_retry;
		a.rnr_timer_us = req->rnr_timer_us;
	}
	if (req->attr_mask & RNIC_QP_ATTR_DEST_QPN) {
		if (req->dest_qpn >= nic->max_qp) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: dest_qpn %u out of range (max %u)\n",
					     qp->qpn, req->dest_qpn, nic->max_qp - 1);
			return -EINVAL;
		}
		a.dest_qpn = req->dest_qpn;
	}
	if (req->attr_mask & RNIC_QP_ATTR_QKEY)
		a.qkey = req->dest_ip;
	ret = rnic_qp_check_remote(nic, qp, req, &a);
	if (ret)
		return ret;

	/* Leaving RESET: the device starts at index 0 of empty rings. */
	if (qp->state == RNIC_QPS_RESET && req->qp_state == RNIC_QPS_INIT) {
		rnic_wq_reset(&qp->sq);
		rnic_wq_reset(&qp->rq);
	}

	mutex_lock(&nic->cmd_lock);
	ctx = &nic->qp_ctx[qp->qpn];
	rnic_qp_fill_ctx(qp, ctx, req->qp_state, &a);
	if (nic->qp_path && req->attr_mask & RNIC_QP_ATTR_DEST_IP) {
		if (path)
			nic->qp_path[qp->qpn] = *path;
		else
			memset(&nic->qp_path[qp->qpn], 0, sizeof(*path));
	}
	ret = rnic_cmd(nic, RNIC_CMD_MODIFY_QP, qp->qpn);
	hw_state = READ_ONCE(ctx->state);
	mutex_unlock(&nic->cmd_lock);

	if (ret) {
		/* The device writes back the QP's current state after every QP command. */
		if (ret != -EIO && rnic_qps_valid(hw_state))
			qp->state = hw_state;
		return ret;
	}

	rnic_qp_set_attrs(qp, &a);
	qp->state = req->qp_state;
	if (req->qp_state == RNIC_QPS_RESET) {
		/* Completions still queued for the old incarnation must not match. */
		qp->gen = ++nic->qp_gen[qp->qpn];
		rnic_wq_reset(&qp->sq);
		rnic_wq_reset(&qp->rq);
	}
	return 0;
}

int rnic_query_qp(struct rnic_ucontext *uc, struct rnic_query_qp *req)
{
	struct rnic_nic *nic = uc->nic;
	struct rnic_qp_ctx *ctx;
	struct rnic_qp *qp;
	int ret;

	qp = xa_load(&uc->qps, req->qpn);
	if (!qp)
		return -ENOENT;
	if (qp->state == RNIC_QPS_RESET) {
		req->qp_state = RNIC_QPS_RESET;
		req->err_reason = RNIC_QP_ERR_NONE;
		req->sq_ci = 0;
		req->rq_ci = 0;
		return 0;
	}

	mutex_lock(&nic->cmd_lock);
	ctx = &nic->qp_ctx[qp->qpn];
	ret = rnic_cmd(nic, RNIC_CMD_QUERY_QP, qp->qpn);
	if (!ret) {
		req->qp_state = READ_ONCE(ctx->state);
		req->err_reason = READ_ONCE(ctx->err_reason);
		req->sq_ci = READ_ONCE(ctx->sq_ci);
		req->rq_ci = READ_ONCE(ctx->rq_ci);
	}
	mutex_unlock(&nic->cmd_lock);
	if (ret)
		return ret;
	if (req->qp_state == RNIC_QPS_ERR)
		qp->state = RNIC_QPS_ERR;
	return 0;
}

/* Moves a QP to ERROR (its outstanding WRs are flushed); used to quiesce before revoking. */
void rnic_qp_to_err(struct rnic_ucontext *uc, struct rnic_qp *qp)
{
	struct rnic_nic *nic = uc->nic;
	struct rnic_qp_attrs a;

	if (qp->state == RNIC_QPS_RESET || qp->state == RNIC_QPS_ERR)
		return;
	rnic_qp_get_attrs(qp, &a);
	mutex_lock(&nic->cmd_lock);
	rnic_qp_fill_ctx(qp, &nic->qp_ctx[qp->qpn], RNIC_QPS_ERR, &a);
	if (!rnic_cmd(nic, RNIC_CMD_MODIFY_QP, qp->qpn))
		qp->state = RNIC_QPS_ERR;
	mutex_unlock(&nic->cmd_lock);
}
