/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the RNIC's verbs objects (docs/verbs.md).
 *
 * struct rnic_nic is the RNIC function's state: the common BAR0/MSI-X part, the context
 * tables and MTT the device reads (bring-up, §1), the command mutex (§2), and the files
 * open on its character device. Objects (PD, CQ, QP, MR) belong to one open file
 * (struct rnic_ucontext) and are found through that file's xarrays; every ioctl of a file
 * runs under the file's mutex, except the sleep of POLL_CQ.
 *
 * Locking order: rnic_ucontext.lock -> rnic_nic.cmd_lock / rnic_nic.mtt_lock.
 * rnic_nic.files_lock -> rnic_ucontext.lock (only at remove).
 */
#ifndef _RNIC_VERBS_H
#define _RNIC_VERBS_H

#include <linux/idr.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm_types.h>
#include <linux/mutex.h>
#include <linux/scatterlist.h>
#include <linux/xarray.h>

#include "rnic_common.h"
#include "rnic_p2p.h"
#include "uapi/rnic_emu_uapi.h"

#define RNIC_MTT_ENTRIES	262144		/* 2 MiB of 64-bit page addresses */
#define RNIC_MR_PAGE_SHIFT	12
#define RNIC_MAX_PD		65536
#define RNIC_POLL_MAX_TIMEOUT_MS	60000
#define RNIC_RNR_TIMER_MAX_US	1000000
#define RNIC_PATH_MTU_MIN_LOG2	8		/* 256 bytes */
#define RNIC_PATH_MTU_MAX_LOG2	12		/* 4096 bytes */
#define RNIC_QP_DEFAULT_RETRY_CNT	7
#define RNIC_QP_DEFAULT_TIMEOUT	14		/* 4.096 us * 2^14 = 67 ms */

/* Driver-side counters, shown in the driver_stats sysfs attribute. */
struct rnic_drv_stats {
	atomic64_t cmd_errors;
	atomic64_t mr_reg_failures;
	atomic64_t mr_pinned_pages;
	atomic64_t post_ring_full;
	atomic64_t stale_cqes;
	atomic64_t async_errors;
	atomic64_t p2p_fallbacks;	/* GPU MRs that fell back to a bounce buffer */
	atomic64_t mr_bounce_pages;	/* bounce pages allocated now */
};

struct rnic_nic {
	struct rnic_dev rd;		/* first: drvdata and the common sysfs use it */
	struct kref ref;		/* probe + one per open file */
	bool dead;			/* remove() has torn the verbs state down */

	u32 max_qp, max_cq, max_mr, max_ring_log2;
	void __iomem *dbp;		/* doorbell page (BAR2), NULL: MMIO doorbells only */
	atomic_t *vec_seq;		/* nvec counters, bumped by each interrupt */
	atomic_t next_vector;		/* round-robin CQ vector choice */

	struct mutex cmd_lock;		/* one command at a time; guards the context tables */
	struct rnic_qp_ctx *qp_ctx;
	dma_addr_t qp_ctx_dma;
	struct rnic_cq_ctx *cq_ctx;
	dma_addr_t cq_ctx_dma;
	struct rnic_mr_ctx *mr_ctx;
	dma_addr_t mr_ctx_dma;
	__le64 *mtt;
	dma_addr_t mtt_dma;

	struct mutex mtt_lock;		/* guards mtt_map */
	unsigned long *mtt_map;		/* RNIC_MTT_ENTRIES bits, set = in use */

	struct ida pd_ida, cq_ida, qp_ida, mr_ida;
	u8 *mr_gen;			/* max_mr key bytes (generation per MR index) */
	u32 *qp_gen;			/* max_qp generations, tags wr_ids of a QP */

	char misc_name[32];
	int misc_id;
	struct miscdevice misc;

	struct mutex files_lock;
	struct list_head files;

	struct rnic_drv_stats stats;

	struct list_head p2p_node;	/* in the GPUDirect registry (rnic_p2p.c) */
};

/* rnic_main.c: the node index from rnic_emu.node=N, or -1 */
extern int rnic_node;

static inline struct rnic_nic *to_nic(struct rnic_dev *rd)
{
	return container_of(rd, struct rnic_nic, rd);
}

static inline struct device *nic_dev(struct rnic_nic *nic)
{
	return &nic->rd.pdev->dev;
}

/* One open file of /dev/rnic_emuN. */
struct rnic_ucontext {
	struct rnic_nic *nic;
	struct mutex lock;
	bool dead;			/* the device went away: objects already destroyed */
	struct list_head node;		/* in nic->files */
	struct xarray pds, cqs, qps, mrs;
};

struct rnic_pd {
	u32 pdn;
	unsigned int users;		/* QPs and MRs */
};

struct rnic_cq {
	struct kref ref;		/* the file + a sleeping POLL_CQ */
	struct rnic_nic *nic;
	u32 cqn;
	u32 log_size;
	u32 vector;
	u32 ci;				/* free-running consumer index */
	bool dead;			/* destroyed; wakes and fails a sleeping poller */
	unsigned int users;		/* QPs */
	struct rnic_cqe *ring;
	dma_addr_t ring_dma;
};

/* One work queue (SQ or RQ) of a QP, ring memory owned by the driver. */
struct rnic_wq {
	u32 log_size;
	u32 log_stride;
	u16 pi, ci;			/* free-running producer, consumer (slots freed) */
	void *ring;
	dma_addr_t ring_dma;
	u64 *wr_id;			/* the caller's wr_id per slot */
	unsigned long *busy;		/* per slot: a WQE is outstanding */
};

struct rnic_qp {
	u32 qpn;
	u32 gen;			/* tags the device-visible wr_ids; bumped at RESET */
	u32 state;			/* as the driver last saw it (RNIC_QPS_*) */
	struct rnic_pd *pd;
	struct rnic_cq *send_cq, *recv_cq;
	u32 max_send_sge, max_recv_sge, max_inline;
	/* attributes the driver writes into the context (MODIFY_QP mask semantics) */
	u8 access, rnr_retry;
	u32 rnr_timer_us;
	u32 dest_qpn;
	bool dest_valid;
	/* remote attributes (docs/fabric.md): dest_ip 0 = loopback */
	u32 dest_ip;
	u32 rq_psn, sq_psn;
	u8 path_mtu_log2;		/* 8..12 */
	u8 retry_cnt, timeout;
	struct rnic_wq sq, rq;
};

struct rnic_mr {
	u32 index;
	u32 key;			/* lkey = rkey */
	u32 access;
	struct rnic_pd *pd;
	u64 iova, length;
	u32 npages;
	u32 mtt_offset;
	struct page **pages;		/* the pinned user pages */
	struct sg_table sgt;		/* what the device uses (the bounce pages for BOUNCE) */
	struct mm_struct *mm;		/* pinned_vm accounting */
	u32 path;			/* RNIC_MR_PATH_* */
	struct pci_dev *provider;	/* GPU memory: the GPU (a reference) */
	struct page **bounce;		/* BOUNCE: npages host pages, page i mirrors pages[i] */
};

/* rnic_verbs.c */
int rnic_verbs_init(struct rnic_nic *nic);
void rnic_verbs_fini(struct rnic_nic *nic);
void rnic_nic_vec_event(struct rnic_dev *rd, unsigned int vec);
int rnic_cmd(struct rnic_nic *nic, u32 op, u32 index);
void rnic_nic_put(struct rnic_nic *nic);

int rnic_alloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req);
int rnic_dealloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req);
int rnic_create_cq(struct rnic_ucontext *uc, struct rnic_create_cq *req);
int rnic_destroy_cq(struct rnic_ucontext *uc, u32 cqn);
int rnic_create_qp(struct rnic_ucontext *uc, struct rnic_create_qp *req);
int rnic_destroy_qp(struct rnic_ucontext *uc, u32 qpn);
int rnic_modify_qp(struct rnic_ucontext *uc, const struct rnic_modify_qp *req);
int rnic_query_qp(struct rnic_ucontext *uc, struct rnic_query_qp *req);
int rnic_post_send(struct rnic_ucontext *uc, struct rnic_post *req);
int rnic_post_recv(struct rnic_ucontext *uc, struct rnic_post *req);
int rnic_poll_cq(struct rnic_ucontext *uc, struct rnic_poll_cq *req);
void rnic_ucontext_destroy_objects(struct rnic_ucontext *uc);

/* rnic_mr.c */
int rnic_mtt_init(struct rnic_nic *nic);
void rnic_mtt_fini(struct rnic_nic *nic);
int rnic_reg_mr(struct rnic_ucontext *uc, struct rnic_reg_mr *req);
int rnic_dereg_mr(struct rnic_ucontext *uc, u32 index);
int rnic_mr_sync(struct rnic_ucontext *uc, const struct rnic_mr_sync *req);
void rnic_mr_destroy(struct rnic_nic *nic, struct rnic_mr *mr);

/* rnic_cdev.c */
int rnic_cdev_register(struct rnic_nic *nic);
void rnic_cdev_unregister(struct rnic_nic *nic);

extern const struct attribute_group rnic_nic_stats_group;

#endif /* _RNIC_VERBS_H */
