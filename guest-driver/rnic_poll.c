// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: POLL_CQ (docs/verbs.md §5).
 *
 * CQEs are read with the owner rule, matched to their slot through the driver's wr_id
 * (rnic_post.c), and turned back into the caller's wr_id; a completion frees its slot and
 * every earlier slot of its queue. CQEs of a destroyed or reset QP are dropped. One call
 * consumes at most one ring's worth of CQEs, so a device that keeps writing stale entries
 * cannot keep it spinning. The file's mutex is held only while CQEs are consumed: the
 * completions are copied to user space after it is dropped, and it is dropped while the
 * caller sleeps. An empty poll checks (at most every RNIC_ALIVE_CHECK_MS) that the device
 * still answers, so a caller of a dead device gets -ENODEV instead of waiting forever.
 */
#include <linux/jiffies.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "rnic_dbpage.h"
#include "rnic_fault.h"
#include "rnic_verbs.h"
#include "uapi/rnic_emu_ring.h"

/* Matches a CQE to its slot, frees the slots up to it; false: stale, drop it. */
static bool rnic_cqe_to_wc(struct rnic_ucontext *uc, struct rnic_cq *cq,
			   const struct rnic_cqe *cqe, struct rnic_wc *wc)
{
	struct rnic_nic *nic = uc->nic;
	bool recv = rnic_wrid_recv(cqe->wr_id);
	u16 idx = rnic_wrid_index(cqe->wr_id);
	struct rnic_qp *qp;
	struct rnic_wq *wq;
	u16 off, outstanding, k;

	qp = xa_load(&uc->qps, cqe->qpn);
	if (!qp || !rnic_wrid_valid(cqe->wr_id) || qp->gen != rnic_wrid_gen(cqe->wr_id) ||
	    (recv ? qp->recv_cq : qp->send_cq) != cq) {
		atomic64_inc(&nic->stats.stale_cqes);
		dev_dbg(nic_dev(nic), "CQ %u: dropping CQE of QP %u wr_id 0x%llx (QP gone or reset)\n",
			cq->cqn, cqe->qpn, cqe->wr_id);
		return false;
	}
	wq = recv ? &qp->rq : &qp->sq;
	outstanding = wq->pi - wq->ci;
	off = idx - wq->ci;
	if (off >= outstanding || !test_bit(rnic_ring_slot(idx, wq->log_size), wq->busy)) {
		atomic64_inc(&nic->stats.stale_cqes);
		dev_warn_ratelimited(nic_dev(nic), "CQ %u: CQE for QP %u %s index %u, which is not outstanding (ci %u pi %u)\n",
				     cq->cqn, qp->qpn, recv ? "RQ" : "SQ", idx, wq->ci, wq->pi);
		return false;
	}
	for (k = 0; k <= off; k++)
		clear_bit(rnic_ring_slot((u16)(wq->ci + k), wq->log_size), wq->busy);
	wq->ci = idx + 1;

	wc->wr_id = wq->wr_id[rnic_ring_slot(idx, wq->log_size)];
	wc->status = cqe->status;
	wc->opcode = cqe->opcode;
	wc->byte_len = cqe->byte_len;
	wc->imm_data = cqe->imm_data;
	wc->qpn = cqe->qpn;
	wc->src_qp = cqe->src_qp;
	wc->flags = cqe->flags;
	wc->syndrome = cqe->syndrome;
	return true;
}

/* Consumes up to @n valid CQEs (owner rule), at most one ring's worth per call. */
static u32 rnic_cq_poll(struct rnic_ucontext *uc, struct rnic_cq *cq, struct rnic_wc *wcs, u32 n)
{
	u32 mask = (1U << cq->log_size) - 1;
	u32 got = 0, consumed = 0;
	struct rnic_cqe *slot, cqe;

	while (got < n && consumed <= mask) {
		slot = &cq->ring[rnic_ring_slot(cq->ci, cq->log_size)];
		if (READ_ONCE(slot->owner) != rnic_ring_owner(cq->ci, cq->log_size))
			break;
		dma_rmb();	/* the owner byte is written last */
		cqe = *slot;
		cq->ci++;
		consumed++;
		if (rnic_cqe_to_wc(uc, cq, &cqe, &wcs[got]))
			got++;
	}
	if (consumed)
		rnic_cq_set_ci(uc->nic, cq->cqn, cq->ci & 0xffff);
	return got;
}

/* Arms the CQ: its next completion raises its vector (which the interrupt hook expects). */
static void rnic_cq_arm(struct rnic_nic *nic, struct rnic_cq *cq)
{
	atomic_inc(&nic->vec_armed[cq->vector]);
	iowrite32(rnic_db_value(cq->cqn, 0), nic->rd.bar0 + CQ_ARM);
}

/*
 * Polls under uc->lock; with a timeout, arms and sleeps (lock dropped) until the CQ's
 * vector fires, at most a second at a time (to notice a device that went away).
 */
static int rnic_poll_locked(struct rnic_ucontext *uc, struct rnic_poll_cq *req,
			    struct rnic_wc *wcs, u32 *got)
{
	struct rnic_nic *nic = uc->nic;
	unsigned long deadline;
	struct rnic_cq *cq;
	long left, slice;
	bool slept_out = false;
	int ret = 0;
	u32 seq;

	cq = xa_load(&uc->cqs, req->cqn);
	if (!cq)
		return -ENOENT;
	*got = rnic_cq_poll(uc, cq, wcs, req->num_entries);
	if (*got)
		return 0;
	if (!rnic_nic_alive_ratelimited(nic))
		return -ENODEV;
	if (!req->timeout_ms)
		return 0;

	deadline = jiffies + msecs_to_jiffies(req->timeout_ms);
	kref_get(&cq->ref);
	for (;;) {
		/* Poll, arm, poll again, then sleep until the CQ's vector fires. */
		seq = atomic_read(&nic->vec_seq[cq->vector]);
		rnic_cq_arm(nic, cq);
		*got = rnic_cq_poll(uc, cq, wcs, req->num_entries);
		if (*got && slept_out)
			rnic_fault_missed_irq(nic, cq->cqn);	/* a whole slice, no interrupt */
		left = (long)(deadline - jiffies);
		if (*got || left <= 0)
			break;
		slice = min_t(long, left, HZ);
		mutex_unlock(&uc->lock);
		left = wait_event_interruptible_timeout(nic->rd.irq_wq,
				atomic_read(&nic->vec_seq[cq->vector]) != seq ||
				READ_ONCE(cq->dead) || test_bit(RNIC_NIC_GONE, &nic->flags),
				slice);
		mutex_lock(&uc->lock);
		slept_out = left == 0;
		if (uc->dead || !rnic_nic_alive_ratelimited(nic)) {
			ret = -ENODEV;
			break;
		}
		if (cq->dead) {
			ret = -ENOENT;
			break;
		}
		if (left < 0) {
			ret = -EINTR;
			break;
		}
	}
	rnic_cq_put(cq);
	return ret;
}

int rnic_poll_cq(struct rnic_ucontext *uc, struct rnic_poll_cq *req)
{
	struct rnic_wc *wcs;
	u32 got = 0;
	int ret;

	req->num_polled = 0;
	if (req->num_entries == 0 || req->num_entries > RNIC_UAPI_MAX_POLL ||
	    req->timeout_ms > RNIC_POLL_MAX_TIMEOUT_MS) {
		dev_warn_ratelimited(nic_dev(uc->nic), "POLL_CQ: %u entries (1..%u), timeout %u ms (max %u)\n",
				     req->num_entries, RNIC_UAPI_MAX_POLL, req->timeout_ms,
				     RNIC_POLL_MAX_TIMEOUT_MS);
		return -EINVAL;
	}
	wcs = kvmalloc_array(req->num_entries, sizeof(*wcs), GFP_KERNEL);
	if (!wcs)
		return -ENOMEM;
	ret = rnic_uc_lock(uc);
	if (!ret) {
		ret = rnic_poll_locked(uc, req, wcs, &got);
		rnic_uc_unlock(uc);
	}
	/* Outside the lock: the destination may fault for as long as user space wants. */
	if (!ret && got && copy_to_user(u64_to_user_ptr(req->wcs), wcs, got * sizeof(*wcs)))
		ret = -EFAULT;
	if (!ret)
		req->num_polled = got;
	kvfree(wcs);
	return ret;
}
