// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: POST_SEND and POST_RECV (docs/verbs.md §3).
 *
 * Work requests are copied from user space in chunks of RNIC_POST_CHUNK (each with its
 * inline payload) before the file's mutex is taken, so that a fault user space controls
 * never holds it; then each is validated and written into the next ring slot, and the
 * doorbell is rung once per chunk (rnic_post_doorbell(), the one place that tells the
 * device about new WQEs). Keys and addresses are the device's to check.
 *
 * The wr_id the device sees is not the caller's: it is rnic_wrid() of the QP's generation,
 * the queue and the producer index (uapi/rnic_emu_ring.h), so that a completion names its
 * slot (rnic_poll.c puts the caller's back).
 */
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "rnic_dbpage.h"
#include "rnic_verbs.h"
#include "uapi/rnic_emu_ring.h"

#define RNIC_WQE_HDR_SIZE	sizeof(struct rnic_wqe)
#define RNIC_MAX_STRIDE_LOG	8
#define RNIC_POST_CHUNK		32

/* One work request as copied in, with its inline payload. */
struct rnic_post_wr {
	union {
		struct rnic_send_wr s;
		struct rnic_recv_wr r;
	};
	u8 inl[RNIC_UAPI_MAX_INLINE];
};

static bool rnic_wq_full(const struct rnic_wq *wq)
{
	return rnic_ring_full(wq->pi, wq->ci, wq->log_size);
}

/* Where the WQE of the queue's producer index goes. */
static void *rnic_wq_next(const struct rnic_wq *wq)
{
	return wq->ring + rnic_ring_offset(wq->pi, wq->log_size, wq->log_stride);
}

/* uAPI SGEs (ours) to device SGEs (the generated contract), field by field. */
static void rnic_copy_sges(u8 *dst, const struct rnic_usge *src, u32 n)
{
	struct rnic_sge sge;
	u32 i;

	for (i = 0; i < n; i++) {
		sge.addr = src[i].addr;
		sge.length = src[i].length;
		sge.lkey = src[i].lkey;
		memcpy(dst + i * sizeof(sge), &sge, sizeof(sge));
	}
}

static int rnic_check_send_wr(struct rnic_nic *nic, const struct rnic_qp *qp,
			      const struct rnic_send_wr *wr)
{
	struct device *dev = nic_dev(nic);

	if (wr->pad) {
		dev_warn_ratelimited(dev, "POST_SEND QP %u: non-zero padding\n", qp->qpn);
		return -EINVAL;
	}
	switch (wr->opcode) {
	case RNIC_WQE_OP_RDMA_WRITE:
	case RNIC_WQE_OP_RDMA_WRITE_IMM:
	case RNIC_WQE_OP_RDMA_READ:
	case RNIC_WQE_OP_SEND:
	case RNIC_WQE_OP_SEND_IMM:
		break;
	default:
		dev_warn_ratelimited(dev, "POST_SEND QP %u: unknown opcode %u\n", qp->qpn, wr->opcode);
		return -EINVAL;
	}
	if (wr->flags & ~(RNIC_WQE_FLAG_SIGNALED | RNIC_WQE_FLAG_INLINE | RNIC_WQE_FLAG_SOLICITED)) {
		dev_warn_ratelimited(dev, "POST_SEND QP %u: unknown flags 0x%x\n", qp->qpn, wr->flags);
		return -EINVAL;
	}
	if (wr->flags & RNIC_WQE_FLAG_INLINE) {
		if (wr->opcode == RNIC_WQE_OP_RDMA_READ || wr->num_sge ||
		    wr->inline_len > qp->max_inline) {
			dev_warn_ratelimited(dev, "POST_SEND QP %u: inline %u bytes (max %u) with opcode %u, %u SGEs\n",
					     qp->qpn, wr->inline_len, qp->max_inline, wr->opcode,
					     wr->num_sge);
			return -EINVAL;
		}
	} else if (wr->num_sge > qp->max_send_sge || wr->inline_len) {
		dev_warn_ratelimited(dev, "POST_SEND QP %u: %u SGEs (max %u), inline_len %u without INLINE\n",
				     qp->qpn, wr->num_sge, qp->max_send_sge, wr->inline_len);
		return -EINVAL;
	}
	return 0;
}

static int rnic_post_send_one(struct rnic_nic *nic, struct rnic_qp *qp,
			      const struct rnic_send_wr *wr, const u8 *inl, u8 *buf)
{
	struct rnic_wqe *hdr = (struct rnic_wqe *)buf;
	size_t len = RNIC_WQE_HDR_SIZE;
	u32 slot;
	int ret;

	ret = rnic_check_send_wr(nic, qp, wr);
	if (ret)
		return ret;
	if (rnic_wq_full(&qp->sq)) {
		atomic64_inc(&nic->stats.post_ring_full);
		dev_warn_ratelimited(nic_dev(nic), "POST_SEND QP %u: send queue full (%u WQEs outstanding)\n",
				     qp->qpn, 1U << qp->sq.log_size);
		return -ENOMEM;
	}

	memset(hdr, 0, sizeof(*hdr));
	hdr->opcode = wr->opcode;
	hdr->flags = wr->flags;
	hdr->imm_data = wr->imm_data;
	hdr->wr_id = rnic_wrid(qp->gen, false, qp->sq.pi);
	hdr->remote_addr = wr->remote_addr;
	hdr->rkey = wr->rkey;
	if (wr->flags & RNIC_WQE_FLAG_INLINE) {
		hdr->inline_len = wr->inline_len;
		memcpy(buf + len, inl, wr->inline_len);	/* copied in before the lock */
		len += wr->inline_len;
	} else {
		hdr->num_sge = wr->num_sge;
		rnic_copy_sges(buf + len, wr->sge, wr->num_sge);
		len += wr->num_sge * sizeof(struct rnic_sge);
	}

	slot = rnic_ring_slot(qp->sq.pi, qp->sq.log_size);
	memcpy(rnic_wq_next(&qp->sq), buf, len);
	qp->sq.wr_id[slot] = wr->wr_id;
	set_bit(slot, qp->sq.busy);
	qp->sq.pi++;
	return 0;
}

static int rnic_post_recv_one(struct rnic_nic *nic, struct rnic_qp *qp,
			      const struct rnic_recv_wr *wr, u8 *buf)
{
	struct rnic_wqe *hdr = (struct rnic_wqe *)buf;
	size_t len = RNIC_WQE_HDR_SIZE;
	u32 slot;

	if (wr->pad || wr->num_sge > qp->max_recv_sge) {
		dev_warn_ratelimited(nic_dev(nic), "POST_RECV QP %u: %u SGEs (max %u) or non-zero padding\n",
				     qp->qpn, wr->num_sge, qp->max_recv_sge);
		return -EINVAL;
	}
	if (rnic_wq_full(&qp->rq)) {
		atomic64_inc(&nic->stats.post_ring_full);
		dev_warn_ratelimited(nic_dev(nic), "POST_RECV QP %u: receive queue full (%u WQEs outstanding)\n",
				     qp->qpn, 1U << qp->rq.log_size);
		return -ENOMEM;
	}

	memset(hdr, 0, sizeof(*hdr));
	hdr->opcode = RNIC_WQE_OP_RECV;
	hdr->num_sge = wr->num_sge;
	hdr->wr_id = rnic_wrid(qp->gen, true, qp->rq.pi);
	rnic_copy_sges(buf + len, wr->sge, wr->num_sge);
	len += wr->num_sge * sizeof(struct rnic_sge);

	slot = rnic_ring_slot(qp->rq.pi, qp->rq.log_size);
	memcpy(rnic_wq_next(&qp->rq), buf, len);
	qp->rq.wr_id[slot] = wr->wr_id;
	set_bit(slot, qp->rq.busy);
	qp->rq.pi++;
	return 0;
}

/*
 * Tells the device about the WQEs written since producer index @old, up to the queue's
 * producer index: through the doorbell page, or the MMIO doorbell (rnic_dbpage.c).
 */
static void rnic_post_doorbell(struct rnic_nic *nic, struct rnic_qp *qp, bool recv, u16 old)
{
	rnic_ring_wq(nic, qp->qpn, recv, old, recv ? qp->rq.pi : qp->sq.pi);
}

/* Copies up to @n WRs (and inline payloads) from @uptr; returns how many, *fault if short. */
static u32 rnic_post_copy_in(struct rnic_post_wr *wrs, const void __user *uptr, u32 n,
			     bool recv, bool *fault)
{
	size_t wr_size = recv ? sizeof(struct rnic_recv_wr) : sizeof(struct rnic_send_wr);
	u32 i;

	for (i = 0; i < n; i++) {
		struct rnic_send_wr *s = &wrs[i].s;

		if (copy_from_user(&wrs[i].s, uptr + (size_t)i * wr_size, wr_size))
			break;
		/* An over-long inline_len is refused by validation; copy only what can be used. */
		if (!recv && (s->flags & RNIC_WQE_FLAG_INLINE) && s->inline_len <= RNIC_UAPI_MAX_INLINE &&
		    copy_from_user(wrs[i].inl, u64_to_user_ptr(s->inline_data), s->inline_len))
			break;
	}
	*fault = i < n;
	return i;
}

/* Posts @n copied WRs under uc->lock; counts them in req->num_posted. */
static int rnic_post_locked(struct rnic_ucontext *uc, struct rnic_post *req,
			    const struct rnic_post_wr *wrs, u32 n, bool recv, u8 *buf)
{
	struct rnic_nic *nic = uc->nic;
	struct rnic_qp *qp;
	u32 i, posted = 0;
	int ret = 0;
	u16 old;

	qp = xa_load(&uc->qps, req->qpn);
	if (!qp)
		return -ENOENT;
	if (recv ? qp->state == RNIC_QPS_RESET :
		   qp->state != RNIC_QPS_RTS && qp->state != RNIC_QPS_ERR) {
		dev_warn_ratelimited(nic_dev(nic), "POST_%s QP %u: QP in state %u\n",
				     recv ? "RECV" : "SEND", qp->qpn, qp->state);
		return -EINVAL;
	}
	old = recv ? qp->rq.pi : qp->sq.pi;
	for (i = 0; i < n; i++) {
		ret = recv ? rnic_post_recv_one(nic, qp, &wrs[i].r, buf) :
			     rnic_post_send_one(nic, qp, &wrs[i].s, wrs[i].inl, buf);
		if (ret)
			break;
		posted++;
	}
	if (posted)
		rnic_post_doorbell(nic, qp, recv, old);
	req->num_posted += posted;
	return ret;
}

/* Shared by POST_SEND and POST_RECV; runs without uc->lock and takes it per chunk. */
static int rnic_post(struct rnic_ucontext *uc, struct rnic_post *req, bool recv)
{
	size_t wr_size = recv ? sizeof(struct rnic_recv_wr) : sizeof(struct rnic_send_wr);
	const void __user *uptr = u64_to_user_ptr(req->wrs);
	struct rnic_post_wr *wrs;
	bool fault = false;
	u32 done = 0, n;
	u8 *buf;
	int ret;

	req->num_posted = 0;
	if (req->pad)
		return -EINVAL;
	wrs = kvmalloc_array(min_t(u32, req->num_wr, RNIC_POST_CHUNK) ?: 1, sizeof(*wrs),
			     GFP_KERNEL);
	buf = kmalloc(1U << RNIC_MAX_STRIDE_LOG, GFP_KERNEL);
	if (!wrs || !buf) {
		ret = -ENOMEM;
		goto out;
	}
	do {
		n = rnic_post_copy_in(wrs, uptr + (size_t)done * wr_size,
				      min_t(u32, req->num_wr - done, RNIC_POST_CHUNK), recv, &fault);
		ret = rnic_uc_lock(uc);
		if (ret)
			break;
		ret = rnic_post_locked(uc, req, wrs, n, recv, buf);
		rnic_uc_unlock(uc);
		if (!ret && fault)
			ret = -EFAULT;
		done += n;
		cond_resched();
	} while (!ret && done < req->num_wr);
out:
	kfree(buf);
	kvfree(wrs);
	return ret;
}

int rnic_post_send(struct rnic_ucontext *uc, struct rnic_post *req)
{
	return rnic_post(uc, req, false);
}

int rnic_post_recv(struct rnic_ucontext *uc, struct rnic_post *req)
{
	return rnic_post(uc, req, true);
}
