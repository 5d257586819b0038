// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * rdma-core provider for the rnic-emu RNIC (PCI 1234:52e1), see docs/ibverbs.md.
 *
 * libibverbs loads it for an RDMA device whose PCI function matches our IDs (the kernel's
 * guest-driver/rnic_ib.c registers it as rnicN). Here: the control path (device and port
 * queries, PDs, MRs and dma-buf MRs and their re-registration, CQs (also from
 * ibv_create_cq_ex), RC and UC QPs) through the kernel's generic uverbs commands, and the
 * mappings the data path (rnic_dp.c) uses: each CQ's and QP's rings and doorbell page.
 * SRQs are rnic_srq.c's.
 *
 * Not supported: UD/XRC QPs, XRC SRQs, AHs, memory windows, completion timestamps (and
 * atomics on a device before contract minor 12); libibverbs answers those with EOPNOTSUPP.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rnic.h"

/* Driver data follows the core response (struct layouts as DECLARE_DRV_CMD makes them). */
struct rnic_get_context_resp {
	struct ib_uverbs_get_context_resp ibv_resp;
	struct rnic_ib_alloc_ucontext_resp drv;
};

struct rnic_create_ah_resp {
	struct ib_uverbs_create_ah_resp ibv_resp;
	struct rnic_ib_create_ah_resp drv;
};

struct rnic_create_cq_resp {
	struct ib_uverbs_create_cq_resp ibv_resp;
	struct rnic_ib_create_cq_resp drv;
};

struct rnic_create_cq_ex_resp {
	struct ib_uverbs_ex_create_cq_resp ibv_resp;
	struct rnic_ib_create_cq_resp drv;
};

struct rnic_create_qp_resp {
	struct ib_uverbs_ex_create_qp_resp ibv_resp;
	struct rnic_ib_create_qp_resp drv;
};

static size_t page_round(size_t len)
{
	size_t page = sysconf(_SC_PAGESIZE);

	return (len + page - 1) & ~(page - 1);
}

void *rnic_map(struct ibv_context *ibctx, size_t len, uint64_t key)
{
	void *p = mmap(NULL, page_round(len), PROT_READ | PROT_WRITE, MAP_SHARED,
		       ibctx->cmd_fd, key);

	return p == MAP_FAILED ? NULL : p;
}

void rnic_unmap(void *p, size_t len)
{
	if (p)
		munmap(p, page_round(len));
}

static const struct verbs_match_ent rnic_match_table[] = {
	VERBS_PCI_MATCH(0x1234, 0x52e1, NULL),
	{},
};

static int rnic_query_device_ex(struct ibv_context *context,
				const struct ibv_query_device_ex_input *input,
				struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);

	return ibv_cmd_query_device_any(context, input, attr, attr_size, &resp, &resp_size);
}

static int rnic_query_port(struct ibv_context *context, uint8_t port,
			   struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd;

	return ibv_cmd_query_port(context, port, attr, &cmd, sizeof(cmd));
}

static struct ibv_pd *rnic_alloc_pd(struct ibv_context *context)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd;
	struct ibv_pd *pd;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	if (ibv_cmd_alloc_pd(context, pd, &cmd, sizeof(cmd), &resp, sizeof(resp))) {
		free(pd);
		return NULL;
	}
	return pd;
}

static int rnic_dealloc_pd(struct ibv_pd *pd)
{
	int ret = ibv_cmd_dealloc_pd(pd);

	if (!ret)
		free(pd);
	return ret;
}

static struct ibv_mr *rnic_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
				  uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;
	if (ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd, sizeof(cmd),
			   &resp, sizeof(resp))) {
		free(vmr);
		return NULL;
	}
	return &vmr->ibv_mr;
}

/* GPU memory as a dma-buf (GPU_EXPORT_DMABUF of /dev/rnic_gpuN): no driver data. */
static struct ibv_mr *rnic_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					 uint64_t iova, int fd, int access)
{
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;
	ret = ibv_cmd_reg_dmabuf_mr(pd, offset, length, iova, fd, access, vmr, NULL);
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}

/* In place: the kernel keeps the MR's keys (docs/ibverbs.md "MR re-registration"). */
static int rnic_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd, void *addr,
			 size_t length, int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct ibv_rereg_mr cmd;
	int ret;

	ret = ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr, access, pd, &cmd,
			       sizeof(cmd), &resp, sizeof(resp));
	if (ret)
		errno = ret;
	return ret;
}

static int rnic_dereg_mr(struct verbs_mr *vmr)
{
	int ret = ibv_cmd_dereg_mr(vmr);

	if (!ret)
		free(vmr);
	return ret;
}

/* Maps a created CQ's ring and doorbell page (the driver data of either create). */
static int rnic_cq_map(struct ibv_context *ibctx, struct rnic_cq *cq,
		       const struct rnic_ib_create_cq_resp *drv)
{
	cq->cqn = drv->cqn;
	cq->log_size = drv->log_size;
	cq->ring_len = sizeof(struct rnic_cqe) << cq->log_size;
	cq->ring = rnic_map(ibctx, cq->ring_len, drv->ring_key);
	cq->db_page = rnic_map(ibctx, RNIC_DBP_PAGE, drv->db_key);
	if (cq->ring && cq->db_page)
		return 0;
	rnic_unmap(cq->db_page, RNIC_DBP_PAGE);
	rnic_unmap(cq->ring, cq->ring_len);
	return -1;
}

/* A zeroed CQ with its lock, before either create command. */
static struct rnic_cq *rnic_cq_alloc(void)
{
	struct rnic_cq *cq = calloc(1, sizeof(*cq));

	if (cq && pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE)) {
		free(cq);
		return NULL;
	}
	return cq;
}

/* Frees what rnic_cq_alloc() made; errno is kept. */
static void rnic_cq_free(struct rnic_cq *cq)
{
	int err = errno;

	pthread_spin_destroy(&cq->lock);
	free(cq);
	errno = err;
}

/* Undoes a create whose mapping failed: the kernel CQ goes, errno is kept. */
static void rnic_cq_abort(struct rnic_cq *cq)
{
	int err = errno;

	ibv_cmd_destroy_cq(&cq->vcq.cq);
	errno = err;
	rnic_cq_free(cq);
}

static struct ibv_cq *rnic_create_cq(struct ibv_context *ibctx, int cqe,
				     struct ibv_comp_channel *channel, int comp_vector)
{
	struct rnic_create_cq_resp resp = {};
	struct rnic_cq *cq = rnic_cq_alloc();

	if (!cq)
		return NULL;
	if (ibv_cmd_create_cq(ibctx, cqe, channel, comp_vector, &cq->vcq.cq, NULL, 0,
			      &resp.ibv_resp, sizeof(resp))) {
		rnic_cq_free(cq);
		return NULL;
	}
	if (rnic_cq_map(ibctx, cq, &resp.drv)) {
		rnic_cq_abort(cq);
		return NULL;
	}
	return &cq->vcq.cq;
}

/*
 * ibv_create_cq_ex(): the same CQ, polled through start_poll/next_poll/end_poll. Every
 * field of the standard set can be read (SLID, SL and DLID path bits are 0 on RoCE);
 * timestamps, VLANs, flow tags and tag matching are not offered: EOPNOTSUPP.
 */
static struct ibv_cq_ex *rnic_create_cq_ex(struct ibv_context *ibctx,
					   struct ibv_cq_init_attr_ex *attr)
{
	struct rnic_create_cq_ex_resp resp = {};
	struct rnic_cq *cq;

	if ((attr->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) ||
	    (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = rnic_cq_alloc();
	if (!cq)
		return NULL;
	if (ibv_cmd_create_cq_ex(ibctx, attr, &cq->vcq, NULL, 0, &resp.ibv_resp, sizeof(resp), 0)) {
		rnic_cq_free(cq);
		return NULL;
	}
	if (rnic_cq_map(ibctx, cq, &resp.drv)) {
		rnic_cq_abort(cq);
		return NULL;
	}
	rnic_cq_ex_init(cq, attr->wc_flags);
	return &cq->vcq.cq_ex;
}

static int rnic_destroy_cq(struct ibv_cq *ibcq)
{
	struct rnic_cq *cq = to_rcq(ibcq);
	int ret = ibv_cmd_destroy_cq(ibcq);

	if (ret)
		return ret;
	rnic_unmap(cq->db_page, RNIC_DBP_PAGE);
	rnic_unmap(cq->ring, cq->ring_len);
	rnic_cq_free(cq);
	return 0;
}

static int rnic_wq_init(struct ibv_context *ibctx, struct rnic_wq *wq, uint32_t log_size,
			uint32_t log_stride, uint64_t key)
{
	if (log_size > 15 || log_stride < 6 || log_stride > 8)
		return EINVAL;
	wq->log_size = log_size;
	wq->log_stride = log_stride;
	wq->ring_len = (size_t)1 << (log_size + log_stride);
	wq->ring = rnic_map(ibctx, wq->ring_len, key);
	wq->wr_id = calloc((size_t)1 << log_size, sizeof(*wq->wr_id));
	if (!wq->ring || !wq->wr_id)
		return ENOMEM;
	return pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
}

static void rnic_wq_fini(struct rnic_wq *wq)
{
	rnic_unmap(wq->ring, wq->ring_len);
	free(wq->wr_id);
	pthread_spin_destroy(&wq->lock);
}

static void rnic_qp_table_set(struct rnic_context *ctx, uint32_t qpn, struct rnic_qp *qp)
{
	pthread_mutex_lock(&ctx->qp_table_lock);
	__atomic_store_n(&ctx->qp_table[qpn], qp, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
}

static struct ibv_qp *rnic_create_qp_ex(struct ibv_context *ibctx,
					struct ibv_qp_init_attr_ex *attr)
{
	struct rnic_context *ctx = to_rctx(ibctx);
	struct rnic_create_qp_resp resp = {};
	struct ibv_create_qp_ex cmd = {};
	struct rnic_qp *qp;
	int err;

	/*
	 * RC and UC (the kernel refuses UC on a device before contract minor 13), RC on an SRQ
	 * (minor 15: the kernel maps no RQ then, rq_log_stride 0), UD (minor 16; no SRQ). CREATE_FLAGS
	 * is allowed without flags (rdma-core's tests set it so); no flag is offered.
	 */
	if ((attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC && attr->qp_type != IBV_QPT_UD) ||
	    attr->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
				IBV_QP_INIT_ATTR_CREATE_FLAGS) ||
	    (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS && attr->create_flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		err = rnic_qp_ex_init(qp, attr->send_ops_flags, to_rctx(ibctx)->atomics,
				      to_rctx(ibctx)->flush, attr->qp_type);
		if (err) {
			free(qp);
			errno = err;
			return NULL;
		}
	}
	if (ibv_cmd_create_qp_ex2(ibctx, &qp->vqp, attr, &cmd, sizeof(cmd), &resp.ibv_resp,
				  sizeof(resp))) {
		free(qp);
		return NULL;
	}
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
		qp->vqp.comp_mask |= VERBS_QP_EX;
	qp->qpn = resp.drv.qpn;
	qp->gen = resp.drv.gen;	/* new for each QP of this number (rnic_ib_abi.h) */
	/* The command fills attr->cap (the core response may travel by ioctl attributes). */
	qp->max_send_sge = attr->cap.max_send_sge;
	qp->max_recv_sge = attr->cap.max_recv_sge;
	qp->max_inline = resp.drv.max_inline;
	qp->sq_sig_all = attr->sq_sig_all;
	qp->ud = attr->qp_type == IBV_QPT_UD;
	err = qp->qpn >= ctx->max_qp ? EINVAL : 0;
	if (!err)
		err = rnic_wq_init(ibctx, &qp->sq, resp.drv.sq_log_size, resp.drv.sq_log_stride,
				   resp.drv.sq_key);
	if (!err && !attr->srq)
		err = rnic_wq_init(ibctx, &qp->rq, resp.drv.rq_log_size, resp.drv.rq_log_stride,
				   resp.drv.rq_key);
	if (!err) {
		qp->db_page = rnic_map(ibctx, RNIC_DBP_PAGE, resp.drv.db_key);
		err = qp->db_page ? 0 : errno;
	}
	if (err) {
		rnic_unmap(qp->db_page, RNIC_DBP_PAGE);
		rnic_wq_fini(&qp->rq);
		rnic_wq_fini(&qp->sq);
		ibv_cmd_destroy_qp(&qp->vqp.qp);
		free(qp);
		errno = err;
		return NULL;
	}
	attr->cap.max_inline_data = qp->max_inline;
	rnic_qp_table_set(ctx, qp->qpn, qp);
	return &qp->vqp.qp;
}

static struct ibv_qp *rnic_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex ax = {};
	struct ibv_qp *qp;

	/* The extended attributes begin with the basic ones. */
	memcpy(&ax, attr, sizeof(*attr));
	ax.comp_mask = IBV_QP_INIT_ATTR_PD;
	ax.pd = pd;
	qp = rnic_create_qp_ex(pd->context, &ax);
	if (qp)
		attr->cap = ax.cap;
	return qp;
}

/* An address handle (minor 16): the kernel resolves the route and returns the vector. */
static struct ibv_ah *rnic_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct rnic_create_ah_resp resp = {};
	struct rnic_ah *ah;

	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	if (ibv_cmd_create_ah(pd, &ah->ibv_ah, attr, &resp.ibv_resp, sizeof(resp))) {
		free(ah);
		return NULL;
	}
	memcpy(&ah->av, resp.drv.av, sizeof(ah->av));
	return &ah->ibv_ah;
}

static int rnic_destroy_ah(struct ibv_ah *ibah)
{
	int ret = ibv_cmd_destroy_ah(ibah);

	if (ret)
		return ret;
	free(to_rah(ibah));
	return 0;
}

static int rnic_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd;

	return ibv_cmd_query_qp(ibqp, attr, attr_mask, init_attr, &cmd, sizeof(cmd));
}

static int rnic_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct rnic_qp *qp = to_rqp(ibqp);
	struct ibv_modify_qp cmd;
	int ret;

	ret = ibv_cmd_modify_qp(ibqp, attr, attr_mask, &cmd, sizeof(cmd));
	if (ret || !(attr_mask & IBV_QP_STATE) || attr->qp_state != IBV_QPS_RESET)
		return ret;
	/* RESET: the device forgot the queues (and zeroed the page); start over. */
	pthread_spin_lock(&qp->sq.lock);
	pthread_spin_lock(&qp->rq.lock);
	qp->gen++;
	qp->sq.pi = qp->sq.ci = 0;
	qp->rq.pi = qp->rq.ci = 0;
	pthread_spin_unlock(&qp->rq.lock);
	pthread_spin_unlock(&qp->sq.lock);
	return 0;
}

static int rnic_destroy_qp(struct ibv_qp *ibqp)
{
	struct rnic_context *ctx = to_rctx(ibqp->context);
	struct rnic_qp *qp = to_rqp(ibqp);
	int ret;

	/*
	 * Out of the table before the kernel frees the number: a QP created meanwhile by
	 * another thread may get it, and its entry must stay.
	 */
	rnic_qp_table_set(ctx, qp->qpn, NULL);
	ret = ibv_cmd_destroy_qp(ibqp);
	if (ret) {
		rnic_qp_table_set(ctx, qp->qpn, qp);
		return ret;
	}
	rnic_unmap(qp->db_page, RNIC_DBP_PAGE);
	rnic_wq_fini(&qp->rq);
	rnic_wq_fini(&qp->sq);
	free(qp);
	return 0;
}

static void rnic_free_context(struct ibv_context *ibctx)
{
	struct rnic_context *ctx = to_rctx(ibctx);

	free(ctx->qp_table);
	pthread_mutex_destroy(&ctx->qp_table_lock);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops rnic_ctx_ops = {
	.query_device_ex = rnic_query_device_ex,
	.query_port = rnic_query_port,
	.alloc_pd = rnic_alloc_pd,
	.dealloc_pd = rnic_dealloc_pd,
	.reg_mr = rnic_reg_mr,
	.rereg_mr = rnic_rereg_mr,
	.dereg_mr = rnic_dereg_mr,
	.reg_dmabuf_mr = rnic_reg_dmabuf_mr,
	.create_cq = rnic_create_cq,
	.create_cq_ex = rnic_create_cq_ex,
	.poll_cq = rnic_poll_cq,
	.req_notify_cq = rnic_req_notify_cq,
	.destroy_cq = rnic_destroy_cq,
	.create_qp = rnic_create_qp,
	.create_qp_ex = rnic_create_qp_ex,
	.query_qp = rnic_query_qp,
	.modify_qp = rnic_modify_qp,
	.destroy_qp = rnic_destroy_qp,
	.post_send = rnic_post_send,
	.post_recv = rnic_post_recv,
	.create_srq = rnic_create_srq,
	.modify_srq = rnic_modify_srq,
	.query_srq = rnic_query_srq,
	.destroy_srq = rnic_destroy_srq,
	.post_srq_recv = rnic_post_srq_recv,
	.create_ah = rnic_create_ah,
	.destroy_ah = rnic_destroy_ah,
	.free_context = rnic_free_context,
};

static struct verbs_context *rnic_alloc_context(struct ibv_device *ibdev, int cmd_fd,
						void *private_data)
{
	struct rnic_get_context_resp resp = {};
	struct ibv_get_context cmd;
	struct rnic_context *ctx;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx, RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	if (ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd), &resp.ibv_resp, sizeof(resp)))
		goto err_uninit;
	ctx->max_qp = resp.drv.max_qp;
	ctx->max_inline = resp.drv.max_inline;
	ctx->qp_table = calloc(ctx->max_qp ? ctx->max_qp : 1, sizeof(*ctx->qp_table));
	if (!ctx->qp_table)
		goto err_uninit;
	pthread_mutex_init(&ctx->qp_table_lock, NULL);
	verbs_set_ops(&ctx->ibv_ctx, &rnic_ctx_ops);
	{
		/* Atomics as the kernel reports them (IB_ATOMIC_HCA from contract minor 12). */
		struct ibv_device_attr_ex attr = {};
		struct ib_uverbs_ex_query_device_resp qresp;
		size_t qresp_size = sizeof(qresp);

		bool ok = !ibv_cmd_query_device_any(&ctx->ibv_ctx.context, NULL, &attr,
						    sizeof(attr), &qresp, &qresp_size);

		ctx->atomics = ok && attr.orig_attr.atomic_cap != IBV_ATOMIC_NONE;
		/* FLUSH and ATOMIC WRITE as the kernel reports them (contract minor 14). */
		ctx->flush = ok && attr.device_cap_flags_ex & IB_UVERBS_DEVICE_ATOMIC_WRITE;
	}
	return &ctx->ibv_ctx;

err_uninit:
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
	return NULL;
}

static struct verbs_device *rnic_device_alloc(struct verbs_sysfs_dev *sysfs_dev)
{
	struct rnic_device *dev = calloc(1, sizeof(*dev));

	return dev ? &dev->ibv_dev : NULL;
}

static void rnic_uninit_device(struct verbs_device *verbs_device)
{
	free(container_of(verbs_device, struct rnic_device, ibv_dev));
}

static const struct verbs_device_ops rnic_dev_ops = {
	.name = "rnic",
	.match_min_abi_version = RNIC_IB_ABI_VERSION,
	.match_max_abi_version = RNIC_IB_ABI_VERSION,
	.match_table = rnic_match_table,
	.alloc_device = rnic_device_alloc,
	.uninit_device = rnic_uninit_device,
	.alloc_context = rnic_alloc_context,
};
PROVIDER_DRIVER(rnic, rnic_dev_ops);
