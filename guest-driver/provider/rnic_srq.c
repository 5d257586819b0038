// SPDX-License-Identifier: GPL-2.0 OR Linux-OpenIB
/*
 * rdma-core provider for the rnic-emu RNIC: shared receive queues (contract minor 15,
 * docs/verbs.md §4.2, docs/ibverbs.md).
 *
 * The SRQ's ring and its page of the doorbell page are mapped as a QP's RQ; RECV WQEs are
 * written and published the same way (rnic_dp_publish()), and the kernel rings the MMIO
 * doorbell only when the device's event index asks for it (POST_SRQ_RECV with no work
 * requests).
 *
 * What differs from a QP's RQ is the bookkeeping. The device takes the SRQ's WQEs in ring
 * order, when a message needs one, but the QPs that took them complete them in any order,
 * each on its own receive CQ. So a WQE's wr_id names a tag, not a ring position: a table
 * entry holding the caller's wr_id and the ring position the WQE was written to. A tag is
 * free again when its completion is polled; the ring position is known to be taken by the
 * device when that or any later WQE completed (the device takes in ring order). A post
 * needs a free tag and a ring slot the device has taken: at most max_wr WQEs are
 * outstanding, as IBA has it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rnic.h"

struct rnic_create_srq_resp {
	struct ib_uverbs_create_srq_resp ibv_resp;
	struct rnic_ib_create_srq_resp drv;
};

static void rnic_srq_free(struct rnic_srq *srq)
{
	rnic_unmap(srq->db_page, RNIC_DBP_PAGE);
	rnic_unmap(srq->ring, srq->ring_len);
	free(srq->tags);
	free(srq->free_tags);
	pthread_spin_destroy(&srq->lock);
	free(srq);
}

struct ibv_srq *rnic_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct rnic_create_srq_resp resp = {};
	struct ibv_create_srq cmd = {};
	struct rnic_srq *srq;
	uint32_t i, n;
	int err;

	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	if (pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE)) {
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	if (ibv_cmd_create_srq(pd, &srq->vsrq.srq, attr, &cmd, sizeof(cmd), &resp.ibv_resp,
			       sizeof(resp))) {
		err = errno;
		pthread_spin_destroy(&srq->lock);
		free(srq);
		errno = err;
		return NULL;
	}
	srq->srqn = resp.drv.srqn;
	srq->gen = resp.drv.gen;
	srq->max_sge = resp.drv.max_sge;
	srq->log_size = resp.drv.log_size;
	srq->log_stride = resp.drv.log_stride;
	err = srq->log_size > 15 || srq->log_stride < 6 || srq->log_stride > 8 ? EINVAL : 0;
	n = 1U << (err ? 0 : srq->log_size);
	srq->ring_len = (size_t)n << srq->log_stride;
	if (!err) {
		srq->ring = rnic_map(pd->context, srq->ring_len, resp.drv.ring_key);
		srq->db_page = rnic_map(pd->context, RNIC_DBP_PAGE, resp.drv.db_key);
		srq->tags = calloc(n, sizeof(*srq->tags));
		srq->free_tags = calloc(n, sizeof(*srq->free_tags));
		if (!srq->ring || !srq->db_page || !srq->tags || !srq->free_tags)
			err = ENOMEM;
	}
	if (err) {
		ibv_cmd_destroy_srq(&srq->vsrq.srq);
		rnic_srq_free(srq);
		errno = err;
		return NULL;
	}
	for (i = 0; i < n; i++)
		srq->free_tags[i] = (uint16_t)(n - 1 - i);
	srq->nfree = n;
	attr->attr.max_wr = n;
	attr->attr.max_sge = srq->max_sge;
	return &srq->vsrq.srq;
}

int rnic_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int attr_mask)
{
	struct ibv_modify_srq cmd;

	return ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &cmd, sizeof(cmd));
}

int rnic_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd;

	return ibv_cmd_query_srq(ibsrq, attr, &cmd, sizeof(cmd));
}

int rnic_destroy_srq(struct ibv_srq *ibsrq)
{
	int ret = ibv_cmd_destroy_srq(ibsrq);

	if (ret)
		return ret;	/* a QP still receives from it (EBUSY) */
	rnic_srq_free(to_rsrq(ibsrq));
	return 0;
}

int rnic_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr)
{
	struct rnic_srq *srq = to_rsrq(ibsrq);
	uint32_t size = 1U << srq->log_size;
	uint16_t old;
	int err = 0;

	pthread_spin_lock(&srq->lock);
	old = srq->pi;
	for (; wr; wr = wr->next) {
		uint8_t *w = srq->ring + rnic_ring_offset(srq->pi, srq->log_size, srq->log_stride);
		uint16_t tag;

		if (!srq->nfree || (uint16_t)(srq->pi - srq->ci) >= size)
			err = ENOMEM;
		else if (wr->num_sge < 0 || (uint32_t)wr->num_sge > srq->max_sge)
			err = EINVAL;
		if (err) {
			*bad_wr = wr;
			break;
		}
		tag = srq->free_tags[--srq->nfree];
		rnic_write_recv_wqe(w, wr, rnic_wrid(srq->gen, true, tag));
		srq->tags[tag].wr_id = wr->wr_id;
		srq->tags[tag].pos = srq->pi;
		srq->tags[tag].busy = true;
		srq->pi++;
	}
	if (srq->pi != old && rnic_dp_publish(srq->db_page, true, old, srq->pi)) {
		int kick = rnic_kick_recv(ibsrq->context, ibsrq->handle, true);

		if (!err)
			err = kick;
	}
	pthread_spin_unlock(&srq->lock);
	return err;
}

/*
 * The completion of one of the SRQ's WQEs (@wr_id as the device wrote it): the caller's
 * wr_id into *out, the tag freed; false if it names no outstanding WQE (stale: drop it).
 */
bool rnic_srq_complete(struct rnic_srq *srq, uint64_t wr_id, uint64_t *out)
{
	uint16_t tag = rnic_wrid_index(wr_id);
	bool ok;

	pthread_spin_lock(&srq->lock);
	ok = rnic_wrid_gen(wr_id) == srq->gen && tag < 1U << srq->log_size &&
	     srq->tags[tag].busy;
	if (ok) {
		uint16_t next = srq->tags[tag].pos + 1;

		*out = srq->tags[tag].wr_id;
		srq->tags[tag].busy = false;
		srq->free_tags[srq->nfree++] = tag;
		/* The device took every WQE up to this one. */
		if ((int16_t)(next - srq->ci) > 0)
			srq->ci = next;
	}
	pthread_spin_unlock(&srq->lock);
	return ok;
}
