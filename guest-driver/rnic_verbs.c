// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: verbs engine bring-up, commands, PDs, CQs and QPs, posting work
 * requests and polling completions (docs/verbs.md §1-5).
 *
 * Rings are DMA-coherent memory owned by the driver. The wr_id the device sees is not the
 * caller's: it is (QP generation << 32 | RQ bit << 16 | producer index), so that a
 * completion names its slot; the caller's wr_id is kept per slot and put back when the
 * completion is polled. A completion frees its slot and every earlier slot of its queue
 * (§3); completions of a destroyed or reset QP no longer match and are dropped.
 */
#include <linux/bitmap.h>
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/log2.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "rnic_dbpage.h"
#include "rnic_verbs.h"

#ifdef __BIG_ENDIAN
#error "rnic-emu descriptors are little-endian and written as native structs"
#endif

#define RNIC_WRID_RECV		BIT_ULL(16)
#define RNIC_WQE_HDR_SIZE	sizeof(struct rnic_wqe)
#define RNIC_MAX_STRIDE_LOG	8

static const char *const rnic_cmd_names[] = {
	[RNIC_CMD_CREATE_CQ]	= "CREATE_CQ",
	[RNIC_CMD_DESTROY_CQ]	= "DESTROY_CQ",
	[RNIC_CMD_MODIFY_QP]	= "MODIFY_QP",
	[RNIC_CMD_QUERY_QP]	= "QUERY_QP",
	[RNIC_CMD_DESTROY_QP]	= "DESTROY_QP",
	[RNIC_CMD_REG_MR]	= "REG_MR",
	[RNIC_CMD_DEREG_MR]	= "DEREG_MR",
};

static const char *const rnic_cmd_err_names[] = {
	[RNIC_CMD_ERR_BAD_OP]		= "BAD_OP",
	[RNIC_CMD_ERR_BAD_INDEX]	= "BAD_INDEX",
	[RNIC_CMD_ERR_DMA]		= "DMA",
	[RNIC_CMD_ERR_INVALID]		= "INVALID",
	[RNIC_CMD_ERR_BUSY]		= "BUSY",
	[RNIC_CMD_ERR_STATE]		= "STATE",
	[RNIC_CMD_ERR_NOT_FOUND]	= "NOT_FOUND",
	[RNIC_CMD_ERR_DISABLED]		= "DISABLED",
};

static int rnic_cmd_errno(u32 status)
{
	switch (status) {
	case RNIC_CMD_ERR_BAD_INDEX:
	case RNIC_CMD_ERR_INVALID:
	case RNIC_CMD_ERR_STATE:
		return -EINVAL;
	case RNIC_CMD_ERR_BUSY:
		return -EBUSY;
	case RNIC_CMD_ERR_NOT_FOUND:
		return -ENOENT;
	case RNIC_CMD_ERR_BAD_OP:
		return -EOPNOTSUPP;
	case RNIC_CMD_ERR_DMA:
	case RNIC_CMD_ERR_DISABLED:
	default:
		return -EIO;
	}
}

/**
 * rnic_cmd() - run one device command (docs/verbs.md §2)
 * @nic: the RNIC; the caller holds nic->cmd_lock and has written the object's context
 * @op: RNIC_CMD_*
 * @index: object index
 *
 * Return: 0, or the command's error as a negative errno (logged).
 */
int rnic_cmd(struct rnic_nic *nic, u32 op, u32 index)
{
	void __iomem *bar0 = nic->rd.bar0;
	u32 status;

	lockdep_assert_held(&nic->cmd_lock);
	iowrite32(op << RNIC_CMD_OP_SHIFT | index, bar0 + RNIC_REG_CMD);
	status = ioread32(bar0 + RNIC_REG_CMD_STATUS);
	if (status == RNIC_CMD_OK)
		return 0;

	atomic64_inc(&nic->stats.cmd_errors);
	dev_warn(nic_dev(nic), "command %s index %u failed: %s (%u)\n",
		 op < ARRAY_SIZE(rnic_cmd_names) && rnic_cmd_names[op] ? rnic_cmd_names[op] : "?",
		 index,
		 status < ARRAY_SIZE(rnic_cmd_err_names) && rnic_cmd_err_names[status] ?
		 rnic_cmd_err_names[status] : "unknown", status);
	return rnic_cmd_errno(status);
}

/* Interrupt hook (hard-irq context): vector 0 reports asynchronous errors, all count. */
void rnic_nic_vec_event(struct rnic_dev *rd, unsigned int vec)
{
	struct rnic_nic *nic = to_nic(rd);
	u32 err;

	atomic_inc(&nic->vec_seq[vec]);
	if (vec != 0)
		return;
	err = ioread32(rd->bar0 + RNIC_REG_LAST_ERROR);
	if (!err)
		return;
	atomic64_inc(&nic->stats.async_errors);
	dev_warn_ratelimited(&rd->pdev->dev, "asynchronous error: %s, object %u\n",
			     err >> 24 == RNIC_ASYNC_ERR_CQ_OVERFLOW ? "CQ overflow" :
			     err >> 24 == RNIC_ASYNC_ERR_QP ? "QP entered ERROR" :
			     err >> 24 == RNIC_ASYNC_ERR_APERTURE ?
			     "BAR1_APERTURE slot names no GPU BAR1" : "unknown code",
			     err & 0xffffff);
}

static void *rnic_table_alloc(struct rnic_nic *nic, size_t size, dma_addr_t *dma,
			      const char *what)
{
	void *p = dma_alloc_coherent(nic_dev(nic), size, dma, GFP_KERNEL);

	if (!p)
		dev_err(nic_dev(nic), "cannot allocate the %s table (%zu bytes of DMA memory)\n",
			what, size);
	return p;
}

/**
 * rnic_verbs_init() - context tables, MTT and DMA_CTRL (docs/verbs.md §1)
 * @nic: the RNIC, with BAR0 mapped, limits read and interrupts set up
 *
 * Return: 0, or a negative errno with everything undone.
 */
int rnic_verbs_init(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;
	int ret = -ENOMEM;

	mutex_init(&nic->cmd_lock);
	ida_init(&nic->pd_ida);
	ida_init(&nic->cq_ida);
	ida_init(&nic->qp_ida);
	ida_init(&nic->mr_ida);

	nic->mr_gen = kcalloc(nic->max_mr, sizeof(*nic->mr_gen), GFP_KERNEL);
	nic->qp_gen = kcalloc(nic->max_qp, sizeof(*nic->qp_gen), GFP_KERNEL);
	if (!nic->mr_gen || !nic->qp_gen)
		goto err_gen;

	nic->qp_ctx = rnic_table_alloc(nic, nic->max_qp * sizeof(*nic->qp_ctx),
				       &nic->qp_ctx_dma, "QP context");
	if (!nic->qp_ctx)
		goto err_gen;
	nic->cq_ctx = rnic_table_alloc(nic, nic->max_cq * sizeof(*nic->cq_ctx),
				       &nic->cq_ctx_dma, "CQ context");
	if (!nic->cq_ctx)
		goto err_qp_ctx;
	nic->mr_ctx = rnic_table_alloc(nic, nic->max_mr * sizeof(*nic->mr_ctx),
				       &nic->mr_ctx_dma, "MR context");
	if (!nic->mr_ctx)
		goto err_cq_ctx;

	ret = rnic_mtt_init(nic);
	if (ret)
		goto err_mr_ctx;

	writeq(nic->qp_ctx_dma, bar0 + QP_CTX_BASE);
	writeq(nic->cq_ctx_dma, bar0 + CQ_CTX_BASE);
	writeq(nic->mr_ctx_dma, bar0 + MR_CTX_BASE);
	writeq(nic->mtt_dma, bar0 + MTT_BASE);
	iowrite32(RNIC_MTT_ENTRIES, bar0 + MTT_ENTRIES);
	iowrite32(RNIC_DMA_CTRL_ENABLE | RNIC_DMA_CTRL_INT_ENABLE | rnic_dbpage_init(nic),
		  bar0 + DMA_CTRL);
	return 0;

err_mr_ctx:
	dma_free_coherent(nic_dev(nic), nic->max_mr * sizeof(*nic->mr_ctx), nic->mr_ctx,
			  nic->mr_ctx_dma);
err_cq_ctx:
	dma_free_coherent(nic_dev(nic), nic->max_cq * sizeof(*nic->cq_ctx), nic->cq_ctx,
			  nic->cq_ctx_dma);
err_qp_ctx:
	dma_free_coherent(nic_dev(nic), nic->max_qp * sizeof(*nic->qp_ctx), nic->qp_ctx,
			  nic->qp_ctx_dma);
err_gen:
	kfree(nic->qp_gen);
	kfree(nic->mr_gen);
	mutex_destroy(&nic->cmd_lock);
	return ret;
}

/* Undoes rnic_verbs_init(); every object is already destroyed. */
void rnic_verbs_fini(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;

	/* Stop the engine and make it forget the tables before they are freed. */
	iowrite32(0, bar0 + DMA_CTRL);
	iowrite32(RNIC_RESET_MAGIC, bar0 + RNIC_REG_RESET);
	(void)ioread32(bar0 + RNIC_REG_STATUS);
	rnic_dbpage_fini(nic);

	rnic_mtt_fini(nic);
	dma_free_coherent(nic_dev(nic), nic->max_mr * sizeof(*nic->mr_ctx), nic->mr_ctx,
			  nic->mr_ctx_dma);
	dma_free_coherent(nic_dev(nic), nic->max_cq * sizeof(*nic->cq_ctx), nic->cq_ctx,
			  nic->cq_ctx_dma);
	dma_free_coherent(nic_dev(nic), nic->max_qp * sizeof(*nic->qp_ctx), nic->qp_ctx,
			  nic->qp_ctx_dma);
	kfree(nic->qp_gen);
	kfree(nic->mr_gen);
	ida_destroy(&nic->mr_ida);
	ida_destroy(&nic->qp_ida);
	ida_destroy(&nic->cq_ida);
	ida_destroy(&nic->pd_ida);
	mutex_destroy(&nic->cmd_lock);
}

/* ---------------------------------------------------------------- PDs */

int rnic_alloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req)
{
	struct rnic_nic *nic = uc->nic;
	struct rnic_pd *pd;
	int id, ret;

	if (req->pad) {
		dev_warn_ratelimited(nic_dev(nic), "ALLOC_PD: non-zero padding\n");
		return -EINVAL;
	}
	pd = kzalloc(sizeof(*pd), GFP_KERNEL);
	if (!pd)
		return -ENOMEM;
	/* PD 0 is never handed out, so a zeroed context cannot match a real PD. */
	id = ida_alloc_range(&nic->pd_ida, 1, RNIC_MAX_PD - 1, GFP_KERNEL);
	if (id < 0) {
		dev_warn_ratelimited(nic_dev(nic), "ALLOC_PD: no free protection domain\n");
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_free;
	}
	pd->pdn = id;
	ret = xa_insert(&uc->pds, pd->pdn, pd, GFP_KERNEL);
	if (ret)
		goto err_ida;
	req->pd = pd->pdn;
	return 0;

err_ida:
	ida_free(&nic->pd_ida, id);
err_free:
	kfree(pd);
	return ret;
}

static void rnic_pd_free(struct rnic_ucontext *uc, struct rnic_pd *pd)
{
	xa_erase(&uc->pds, pd->pdn);
	ida_free(&uc->nic->pd_ida, pd->pdn);
	kfree(pd);
}

int rnic_dealloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req)
{
	struct rnic_pd *pd = xa_load(&uc->pds, req->pd);

	if (req->pad)
		return -EINVAL;
	if (!pd)
		return -ENOENT;
	if (pd->users) {
		dev_warn_ratelimited(nic_dev(uc->nic), "DEALLOC_PD %u: still used by %u QPs/MRs\n",
				     pd->pdn, pd->users);
		return -EBUSY;
	}
	rnic_pd_free(uc, pd);
	return 0;
}

/* ---------------------------------------------------------------- CQs */

static void rnic_cq_release(struct kref *ref)
{
	kfree(container_of(ref, struct rnic_cq, ref));
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

	cq = kzalloc(sizeof(*cq), GFP_KERNEL);
	if (!cq)
		return -ENOMEM;
	kref_init(&cq->ref);
	cq->nic = nic;
	cq->log_size = order_base_2(req->entries);
	cq->ring = dma_alloc_coherent(dev, sizeof(*cq->ring) << cq->log_size, &cq->ring_dma,
				      GFP_KERNEL);
	if (!cq->ring) {
		dev_warn(dev, "CREATE_CQ: cannot allocate a ring of %u CQEs\n", 1U << cq->log_size);
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
	ida_free(&nic->cq_ida, cq->cqn);
err_ring:
	dma_free_coherent(dev, sizeof(*cq->ring) << cq->log_size, cq->ring, cq->ring_dma);
err_free:
	kfree(cq);
	return ret;
}

/* Destroys a CQ no QP uses. @force: tear down even if the device refuses (release/remove). */
static int rnic_cq_destroy(struct rnic_ucontext *uc, struct rnic_cq *cq, bool force)
{
	struct rnic_nic *nic = uc->nic;
	int ret;

	mutex_lock(&nic->cmd_lock);
	ret = rnic_cmd(nic, RNIC_CMD_DESTROY_CQ, cq->cqn);
	mutex_unlock(&nic->cmd_lock);
	if (ret && !force)
		return ret;

	xa_erase(&uc->cqs, cq->cqn);
	ida_free(&nic->cq_ida, cq->cqn);
	dma_free_coherent(nic_dev(nic), sizeof(*cq->ring) << cq->log_size, cq->ring,
			  cq->ring_dma);
	cq->ring = NULL;
	/* A POLL_CQ asleep on it holds a reference; it wakes, sees dead and fails. */
	WRITE_ONCE(cq->dead, true);
	wake_up_all(&nic->rd.irq_wq);
	kref_put(&cq->ref, rnic_cq_release);
	return 0;
}

int rnic_destroy_cq(struct rnic_ucontext *uc, u32 cqn)
{
	struct rnic_cq *cq = xa_load(&uc->cqs, cqn);

	if (!cq)
		return -ENOENT;
	if (cq->users) {
		dev_warn_ratelimited(nic_dev(uc->nic), "DESTROY_CQ %u: still used by QPs (%u send/receive queues)\n",
				     cqn, cq->users);
		return -EBUSY;
	}
	return rnic_cq_destroy(uc, cq, false);
}

/* ---------------------------------------------------------------- QPs */

static u32 rnic_stride_log(u32 bytes)
{
	if (bytes <= 64)
		return 6;
	if (bytes <= 128)
		return 7;
	return 8;
}

static int rnic_wq_alloc(struct rnic_nic *nic, struct rnic_wq *wq, u32 entries, u32 bytes)
{
	wq->log_size = order_base_2(entries);
	wq->log_stride = rnic_stride_log(bytes);
	wq->ring = dma_alloc_coherent(nic_dev(nic), (size_t)1 << (wq->log_size + wq->log_stride),
				      &wq->ring_dma, GFP_KERNEL);
	wq->wr_id = kvcalloc(1U << wq->log_size, sizeof(*wq->wr_id), GFP_KERNEL);
	wq->busy = bitmap_zalloc(1U << wq->log_size, GFP_KERNEL);
	if (!wq->ring || !wq->wr_id || !wq->busy) {
		dev_warn(nic_dev(nic), "CREATE_QP: cannot allocate a ring of %u x %u bytes\n",
			 1U << wq->log_size, 1U << wq->log_stride);
		return -ENOMEM;
	}
	return 0;
}

static void rnic_wq_free(struct rnic_nic *nic, struct rnic_wq *wq)
{
	if (wq->ring)
		dma_free_coherent(nic_dev(nic), (size_t)1 << (wq->log_size + wq->log_stride),
				  wq->ring, wq->ring_dma);
	kvfree(wq->wr_id);
	bitmap_free(wq->busy);
}

/* Back to an empty queue (QP to RESET: the device forgets its indices too). */
static void rnic_wq_reset(struct rnic_wq *wq)
{
	wq->pi = 0;
	wq->ci = 0;
	bitmap_zero(wq->busy, 1U << wq->log_size);
	memset(wq->ring, 0, (size_t)1 << (wq->log_size + wq->log_stride));
}

static void rnic_qp_free(struct rnic_ucontext *uc, struct rnic_qp *qp)
{
	rnic_wq_free(uc->nic, &qp->rq);
	rnic_wq_free(uc->nic, &qp->sq);
	kfree(qp);
}

int rnic_create_qp(struct rnic_ucontext *uc, struct rnic_create_qp *req)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	u32 max_wr = 1U << nic->max_ring_log2;
	struct rnic_cq *scq, *rcq;
	struct rnic_pd *pd;
	struct rnic_qp *qp;
	int id, ret;

	if (req->pad)
		return -EINVAL;
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

	qp = kzalloc(sizeof(*qp), GFP_KERNEL);
	if (!qp)
		return -ENOMEM;
	ret = rnic_wq_alloc(nic, &qp->sq, req->max_send_wr,
			    RNIC_WQE_HDR_SIZE + max_t(u32, req->max_send_sge * sizeof(struct rnic_sge),
						      req->max_inline));
	if (ret)
		goto err_free;
	ret = rnic_wq_alloc(nic, &qp->rq, req->max_recv_wr,
			    RNIC_WQE_HDR_SIZE + req->max_recv_sge * sizeof(struct rnic_sge));
	if (ret)
		goto err_free;

	id = ida_alloc_max(&nic->qp_ida, nic->max_qp - 1, GFP_KERNEL);
	if (id < 0) {
		dev_warn_ratelimited(dev, "CREATE_QP: all %u QPs in use\n", nic->max_qp);
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_free;
	}
	qp->qpn = id;
	qp->gen = ++nic->qp_gen[qp->qpn];	/* the IDA makes this slot ours */
	qp->state = RNIC_QPS_RESET;
	qp->pd = pd;
	qp->send_cq = scq;
	qp->recv_cq = rcq;
	/* What the stride allows, which may be more than asked for. */
	qp->max_send_sge = min_t(u32, RNIC_UAPI_MAX_SGE,
				 ((1U << qp->sq.log_stride) - RNIC_WQE_HDR_SIZE) / sizeof(struct rnic_sge));
	qp->max_inline = (1U << qp->sq.log_stride) - RNIC_WQE_HDR_SIZE;
	qp->max_recv_sge = min_t(u32, RNIC_UAPI_MAX_SGE,
				 ((1U << qp->rq.log_stride) - RNIC_WQE_HDR_SIZE) / sizeof(struct rnic_sge));
	qp->rnr_retry = 7;
	qp->rnr_timer_us = 10;
	qp->path_mtu_log2 = RNIC_PATH_MTU_MAX_LOG2;
	qp->retry_cnt = RNIC_QP_DEFAULT_RETRY_CNT;
	qp->timeout = RNIC_QP_DEFAULT_TIMEOUT;

	ret = xa_insert(&uc->qps, qp->qpn, qp, GFP_KERNEL);
	if (ret)
		goto err_ida;

	pd->users++;
	scq->users++;
	rcq->users++;

	req->qpn = qp->qpn;
	req->max_send_wr = 1U << qp->sq.log_size;
	req->max_recv_wr = 1U << qp->rq.log_size;
	req->max_send_sge = qp->max_send_sge;
	req->max_recv_sge = qp->max_recv_sge;
	req->max_inline = qp->max_inline;
	return 0;

err_ida:
	ida_free(&nic->qp_ida, qp->qpn);
err_free:
	rnic_qp_free(uc, qp);
	return ret;
}

static void rnic_qp_destroy(struct rnic_ucontext *uc, struct rnic_qp *qp)
{
	struct rnic_nic *nic = uc->nic;

	/* A QP the device never left RESET for has nothing to destroy there. */
	if (qp->state != RNIC_QPS_RESET) {
		mutex_lock(&nic->cmd_lock);
		/* On failure (logged) the rings are freed anyway: the device is told to stop. */
		rnic_cmd(nic, RNIC_CMD_DESTROY_QP, qp->qpn);
		mutex_unlock(&nic->cmd_lock);
	}
	xa_erase(&uc->qps, qp->qpn);
	ida_free(&nic->qp_ida, qp->qpn);
	qp->pd->users--;
	qp->send_cq->users--;
	qp->recv_cq->users--;
	rnic_qp_free(uc, qp);
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
static bool rnic_qp_edge(u32 cur, u32 next, u32 *allowed, u32 *required)
{
	*required = 0;
	*allowed = 0;
	if (next == RNIC_QPS_ERR || next == RNIC_QPS_RESET)
		return true;
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
			   RNIC_QP_ATTR_PATH_MTU;
		*required = RNIC_QP_ATTR_DEST_QPN;
		return true;
	}
	if (cur == RNIC_QPS_RTR && next == RNIC_QPS_RTS) {
		*allowed = RNIC_QP_ATTR_RNR | RNIC_QP_ATTR_SQ_PSN | RNIC_QP_ATTR_RETRY_CNT |
			   RNIC_QP_ATTR_TIMEOUT;
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
	ctx->dest_qpn = a->dest_qpn;
	ctx->rnr_timer_us = a->rnr_timer_us;
	ctx->dest_ip = a->dest_ip;
	ctx->sq_addr = qp->sq.ring_dma;
	ctx->rq_addr = qp->rq.ring_dma;
	ctx->sq_psn = a->sq_psn;
	ctx->rq_psn = a->rq_psn;
	ctx->path_mtu = a->path_mtu_log2;
	ctx->retry_cnt = a->retry_cnt;
	ctx->timeout = a->timeout;
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

int rnic_modify_qp(struct rnic_ucontext *uc, const struct rnic_modify_qp *req)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	u32 allowed, required, hw_state;
	struct rnic_qp_attrs a;
	struct rnic_qp_ctx *ctx;
	struct rnic_qp *qp;
	int ret;

	if (req->pad)
		return -EINVAL;
	qp = xa_load(&uc->qps, req->qpn);
	if (!qp)
		return -ENOENT;
	if (!rnic_qps_valid(req->qp_state)) {
		dev_warn_ratelimited(dev, "MODIFY_QP %u: unknown state %u\n", qp->qpn, req->qp_state);
		return -EINVAL;
	}
	if (!rnic_qp_edge(qp->state, req->qp_state, &allowed, &required)) {
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

	/* Validate everything, then commit (STYLE.md item 10). */
	rnic_qp_get_attrs(qp, &a);
	if (req->attr_mask & RNIC_QP_ATTR_ACCESS) {
		if (req->access & ~(RNIC_ACCESS_REMOTE_WRITE | RNIC_ACCESS_REMOTE_READ)) {
			dev_warn_ratelimited(dev, "MODIFY_QP %u: access 0x%x (QPs take REMOTE_WRITE|REMOTE_READ)\n",
					     qp->qpn, req->access);
			return -EINVAL;
		}
		a.access = req->access;
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

/* ---------------------------------------------------------------- posting */

static u64 rnic_hw_wrid(const struct rnic_qp *qp, bool recv, u16 pi)
{
	return (u64)qp->gen << 32 | (recv ? RNIC_WRID_RECV : 0) | pi;
}

static bool rnic_wq_full(const struct rnic_wq *wq)
{
	return (u16)(wq->pi - wq->ci) >= (1U << wq->log_size);
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
			      const struct rnic_send_wr *wr, u8 *buf)
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
	hdr->wr_id = rnic_hw_wrid(qp, false, qp->sq.pi);
	hdr->remote_addr = wr->remote_addr;
	hdr->rkey = wr->rkey;
	if (wr->flags & RNIC_WQE_FLAG_INLINE) {
		hdr->inline_len = wr->inline_len;
		if (copy_from_user(buf + len, u64_to_user_ptr(wr->inline_data), wr->inline_len))
			return -EFAULT;
		len += wr->inline_len;
	} else {
		hdr->num_sge = wr->num_sge;
		rnic_copy_sges(buf + len, wr->sge, wr->num_sge);
		len += wr->num_sge * sizeof(struct rnic_sge);
	}

	slot = qp->sq.pi & ((1U << qp->sq.log_size) - 1);
	memcpy(qp->sq.ring + ((size_t)slot << qp->sq.log_stride), buf, len);
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
	hdr->wr_id = rnic_hw_wrid(qp, true, qp->rq.pi);
	rnic_copy_sges(buf + len, wr->sge, wr->num_sge);
	len += wr->num_sge * sizeof(struct rnic_sge);

	slot = qp->rq.pi & ((1U << qp->rq.log_size) - 1);
	memcpy(qp->rq.ring + ((size_t)slot << qp->rq.log_stride), buf, len);
	qp->rq.wr_id[slot] = wr->wr_id;
	set_bit(slot, qp->rq.busy);
	qp->rq.pi++;
	return 0;
}

/* Shared by POST_SEND and POST_RECV: copy each WR once, validate, write, then ring once. */
static int rnic_post(struct rnic_ucontext *uc, struct rnic_post *req, bool recv)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	size_t wr_size = recv ? sizeof(struct rnic_recv_wr) : sizeof(struct rnic_send_wr);
	union {
		struct rnic_send_wr s;
		struct rnic_recv_wr r;
	} *wr;
	void __user *uptr = u64_to_user_ptr(req->wrs);
	struct rnic_qp *qp;
	u16 old_pi;
	u8 *buf;
	u32 i;
	int ret = 0;

	req->num_posted = 0;
	if (req->pad)
		return -EINVAL;
	qp = xa_load(&uc->qps, req->qpn);
	if (!qp)
		return -ENOENT;
	if (recv ? qp->state == RNIC_QPS_RESET :
		   qp->state != RNIC_QPS_RTS && qp->state != RNIC_QPS_ERR) {
		dev_warn_ratelimited(dev, "POST_%s QP %u: QP in state %u\n",
				     recv ? "RECV" : "SEND", qp->qpn, qp->state);
		return -EINVAL;
	}
	if (!req->num_wr)
		return 0;
	old_pi = recv ? qp->rq.pi : qp->sq.pi;

	wr = kmalloc(sizeof(*wr), GFP_KERNEL);
	buf = kmalloc(1U << RNIC_MAX_STRIDE_LOG, GFP_KERNEL);
	if (!wr || !buf) {
		ret = -ENOMEM;
		goto out;
	}

	for (i = 0; i < req->num_wr; i++) {
		if (copy_from_user(wr, uptr + (size_t)i * wr_size, wr_size)) {
			ret = -EFAULT;
			break;
		}
		ret = recv ? rnic_post_recv_one(nic, qp, &wr->r, buf) :
			     rnic_post_send_one(nic, qp, &wr->s, buf);
		if (ret)
			break;
		req->num_posted++;
	}

	if (req->num_posted)
		rnic_ring_wq(nic, qp->qpn, recv, old_pi, recv ? qp->rq.pi : qp->sq.pi);
out:
	kfree(buf);
	kfree(wr);
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

/* ---------------------------------------------------------------- polling */

/* Matches a CQE to its slot, frees the slots up to it; false: stale, drop it. */
static bool rnic_cqe_to_wc(struct rnic_ucontext *uc, struct rnic_cq *cq,
			   const struct rnic_cqe *cqe, struct rnic_wc *wc)
{
	struct rnic_nic *nic = uc->nic;
	bool recv = cqe->wr_id & RNIC_WRID_RECV;
	u16 idx = cqe->wr_id & 0xffff;
	struct rnic_qp *qp;
	struct rnic_wq *wq;
	u16 off, outstanding, k;
	u32 mask;

	qp = xa_load(&uc->qps, cqe->qpn);
	if (!qp || qp->gen != (u32)(cqe->wr_id >> 32) ||
	    (cqe->wr_id & 0xfffe0000) || (recv ? qp->recv_cq : qp->send_cq) != cq) {
		atomic64_inc(&nic->stats.stale_cqes);
		dev_dbg(nic_dev(nic), "CQ %u: dropping CQE of QP %u wr_id 0x%llx (QP gone or reset)\n",
			cq->cqn, cqe->qpn, cqe->wr_id);
		return false;
	}
	wq = recv ? &qp->rq : &qp->sq;
	mask = (1U << wq->log_size) - 1;
	outstanding = wq->pi - wq->ci;
	off = idx - wq->ci;
	if (off >= outstanding || !test_bit(idx & mask, wq->busy)) {
		atomic64_inc(&nic->stats.stale_cqes);
		dev_warn_ratelimited(nic_dev(nic), "CQ %u: CQE for QP %u %s index %u, which is not outstanding (ci %u pi %u)\n",
				     cq->cqn, qp->qpn, recv ? "RQ" : "SQ", idx, wq->ci, wq->pi);
		return false;
	}
	for (k = 0; k <= off; k++)
		clear_bit((u16)(wq->ci + k) & mask, wq->busy);
	wq->ci = idx + 1;

	wc->wr_id = wq->wr_id[idx & mask];
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

/* Consumes up to @n valid CQEs (owner rule, docs/verbs.md §5). */
static u32 rnic_cq_poll(struct rnic_ucontext *uc, struct rnic_cq *cq, struct rnic_wc *wcs, u32 n)
{
	u32 mask = (1U << cq->log_size) - 1;
	u32 got = 0, consumed = 0;
	struct rnic_cqe *slot, cqe;

	while (got < n) {
		slot = &cq->ring[cq->ci & mask];
		if (READ_ONCE(slot->owner) != (((cq->ci >> cq->log_size) & 1) ^ 1))
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

/* Called with uc->lock held; drops it while sleeping. */
int rnic_poll_cq(struct rnic_ucontext *uc, struct rnic_poll_cq *req)
{
	struct rnic_nic *nic = uc->nic;
	unsigned long deadline;
	struct rnic_wc *wcs;
	struct rnic_cq *cq;
	long left;
	u32 got, seq;
	int ret = 0;

	req->num_polled = 0;
	if (req->num_entries == 0 || req->num_entries > RNIC_UAPI_MAX_POLL ||
	    req->timeout_ms > RNIC_POLL_MAX_TIMEOUT_MS) {
		dev_warn_ratelimited(nic_dev(nic), "POLL_CQ: %u entries (1..%u), timeout %u ms (max %u)\n",
				     req->num_entries, RNIC_UAPI_MAX_POLL, req->timeout_ms,
				     RNIC_POLL_MAX_TIMEOUT_MS);
		return -EINVAL;
	}
	cq = xa_load(&uc->cqs, req->cqn);
	if (!cq)
		return -ENOENT;
	wcs = kvmalloc_array(req->num_entries, sizeof(*wcs), GFP_KERNEL);
	if (!wcs)
		return -ENOMEM;

	got = rnic_cq_poll(uc, cq, wcs, req->num_entries);
	if (!got && req->timeout_ms) {
		deadline = jiffies + msecs_to_jiffies(req->timeout_ms);
		kref_get(&cq->ref);
		for (;;) {
			/* Poll, arm, poll again, then sleep until the CQ's vector fires. */
			seq = atomic_read(&nic->vec_seq[cq->vector]);
			iowrite32(cq->cqn << RNIC_DB_OBJECT_SHIFT, nic->rd.bar0 + CQ_ARM);
			got = rnic_cq_poll(uc, cq, wcs, req->num_entries);
			if (got || time_after_eq(jiffies, deadline))
				break;
			mutex_unlock(&uc->lock);
			left = wait_event_interruptible_timeout(nic->rd.irq_wq,
					atomic_read(&nic->vec_seq[cq->vector]) != seq ||
					READ_ONCE(cq->dead), deadline - jiffies);
			mutex_lock(&uc->lock);
			if (uc->dead) {
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
		kref_put(&cq->ref, rnic_cq_release);
	}

	if (!ret && got && copy_to_user(u64_to_user_ptr(req->wcs), wcs, got * sizeof(*wcs)))
		ret = -EFAULT;
	if (!ret)
		req->num_polled = got;
	kvfree(wcs);
	return ret;
}

/*
 * Destroys every object of a file: QPs first (the device stops using rings and MRs), then
 * MRs (unpinned only once no QP can reach them), CQs last, then PDs. Called with uc->lock.
 */
void rnic_ucontext_destroy_objects(struct rnic_ucontext *uc)
{
	struct rnic_qp *qp;
	struct rnic_mr *mr;
	struct rnic_cq *cq;
	struct rnic_pd *pd;
	unsigned long i;

	xa_for_each(&uc->qps, i, qp)
		rnic_qp_destroy(uc, qp);
	xa_for_each(&uc->mrs, i, mr) {
		xa_erase(&uc->mrs, i);
		rnic_mr_destroy(uc->nic, mr);
	}
	xa_for_each(&uc->cqs, i, cq)
		rnic_cq_destroy(uc, cq, true);
	xa_for_each(&uc->pds, i, pd)
		rnic_pd_free(uc, pd);
}
