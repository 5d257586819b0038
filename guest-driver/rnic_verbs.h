/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: the RNIC's verbs objects (docs/verbs.md).
 *
 * struct rnic_nic is the RNIC function's state: the common BAR0/MSI-X part, the context
 * tables and MTT the device reads (bring-up, §1), the command mutex (§2), and the files
 * open on its character device. Objects (PD, CQ, QP, MR) belong to one open file
 * (struct rnic_ucontext) and are found through that file's xarrays; every ioctl of a file
 * works on them under the file's mutex. User memory is never touched with that mutex
 * held (REG_MR pins before taking it, POST_* copy the work requests in before, POLL_CQ
 * copies completions out after), so removal never waits for a page fault user space
 * controls.
 *
 * The verbs core is layered; each file calls only the ones below it (beyond the core:
 * rnic_verbs.c's interrupt hook calls ib_core's, rnic_ib_cq_event() and
 * rnic_ib_events_kick(), and the netdev's, rnic_netdev_irq(); bring-up sets up the event
 * queue, rnic_ib_events_init(); rnic_uctx.c drops its reference with rnic_nic_put(), rnic_nic.c;
 * rnic_cmd.c calls the fault hooks):
 *   rnic_verbs.c   bring-up and teardown of the engine, the interrupt hook
 *   rnic_uctx.c    verbs contexts (open files): open, close, destroying their objects,
 *                  freeing the zombies
 *   rnic_pd.c, rnic_cq.c, rnic_qp.c, rnic_post.c, rnic_poll.c: one file per object kind
 *                  or verb; MRs in rnic_mr_dmabuf.c (dma-buf MRs, revocation) over
 *                  rnic_mr.c (pinning, registration) over rnic_mr_p2p.c (DMA mapping,
 *                  P2P, bounce buffers) and rnic_mtt.c (the MTT allocator)
 *   rnic_cmd.c     device commands, surprise-removal detection, a context's mutex,
 *                  ring memory
 * They all include this header and nothing of each other, except the narrow headers of
 * the fault hooks, the doorbell page and the MR files' internals.
 *
 * Locking order: rnic_p2p_lock (GPU removal) -> rnic_nic.files_lock ->
 * rnic_ucontext.lock -> rnic_nic.cmd_lock / rnic_nic.mtt_lock / rnic_nic.zombie_lock.
 *
 * Memory the device may still own is never freed while it may: a destroy the device
 * refused leaves its rings or pages on the zombie lists, freed at remove() after the
 * engine was reset and stopped.
 */
#ifndef _RNIC_VERBS_H
#define _RNIC_VERBS_H

#include <linux/idr.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm_types.h>
#include <linux/mutex.h>
#include <linux/dma-direction.h>
#include <linux/scatterlist.h>
#include <linux/xarray.h>

#include "rnic_common.h"
#include "rnic_p2p.h"
#include "uapi/rnic_emu_uapi.h"

struct rnic_ibdev;
struct rnic_eth;

#define RNIC_MTT_ENTRIES	262144		/* 2 MiB of 64-bit page addresses */
#define RNIC_MR_PAGE_SHIFT	12
#define RNIC_MAX_PD		65536
#define RNIC_FIRST_QPN		2		/* below: the IBTA special QPs (QP0, QP1 = GSI) */
#define RNIC_POLL_MAX_TIMEOUT_MS	60000
#define RNIC_RNR_TIMER_MAX_US	1000000
#define RNIC_PATH_MTU_MIN_LOG2	8		/* 256 bytes */
#define RNIC_PATH_MTU_MAX_LOG2	12		/* 4096 bytes */
#define RNIC_QP_DEFAULT_RETRY_CNT	7
#define RNIC_QP_DEFAULT_TIMEOUT	14		/* 4.096 us * 2^14 = 67 ms */
/*
 * Rings and context tables are physically contiguous (the device takes one bus address
 * each): at most an order-10 allocation (4 MiB), asked for with __GFP_NOWARN so that a
 * user asking for too much gets -EINVAL or -ENOMEM, never a page-allocator warning.
 */
#define RNIC_MAX_RING_BYTES	(4U << 20)
#define RNIC_RING_GFP		(GFP_KERNEL_ACCOUNT | __GFP_NOWARN)
#define RNIC_MAX_TABLE_BYTES	(4U << 20)
/* How often an empty POLL_CQ may read a register to notice a device that went away. */
#define RNIC_ALIVE_CHECK_MS	100

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
	atomic64_t zombie_bytes;	/* freed only at remove: the device refused to let go */
	atomic64_t revoked_mrs;		/* GPU MRs revoked because their GPU went away */
	atomic64_t spurious_irqs;	/* interrupts nothing was waiting for */
	atomic64_t events;		/* event-queue entries taken (rnic_ib_events.c) */
	atomic64_t events_dropped;	/* of those, for no ib_core object, or unknown */
};

struct rnic_nic {
	struct rnic_dev rd;		/* first: drvdata and the common sysfs use it */
	struct kref ref;		/* probe + one per open file */
	bool dead;			/* remove() has torn the verbs state down */
	bool quiesced;			/* engine reset and stopped: no more commands */
	unsigned long flags;		/* RNIC_NIC_GONE */
	struct dentry *debugfs;		/* rnic_emu-<PCI name>: rnic_nic.c */
	unsigned long next_alive_check;	/* jiffies */

	u32 max_qp, max_cq, max_mr, max_ring_log2;
	void __iomem *dbp;		/* doorbell page (BAR2), NULL: MMIO doorbells only */
	atomic_t *vec_seq;		/* nvec counters, bumped by each interrupt */
	atomic_t *vec_armed;		/* nvec: CQ_ARMs not yet answered by an interrupt */
	atomic_t next_vector;		/* round-robin CQ vector choice */

	struct mutex cmd_lock;		/* one command at a time; guards the context tables */
	struct rnic_qp_ctx *qp_ctx;
	dma_addr_t qp_ctx_dma;
	/* QP paths (contract minor 8; NULL on an older device: the MAC follows from dest_ip) */
	struct rnic_qp_path *qp_path;
	dma_addr_t qp_path_dma;
	/* the port's GID table (minor 8; NULL before), under cmd_lock: rnic_ib_gid.c */
	struct rnic_gid_entry *gid_table;
	dma_addr_t gid_table_dma;
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
	atomic_t *qp_num_refs, *cq_num_refs;	/* holders of each number: rnic_num.c */
	u32 max_mr_hw;			/* MAX_MR as the device reports it (max_mr may be less) */

	char misc_name[32];
	int misc_id;
	struct miscdevice misc;

	struct mutex files_lock;
	struct list_head files;

	struct rnic_drv_stats stats;

	struct mutex zombie_lock;	/* guards the two lists below */
	struct list_head zombie_rings;	/* struct rnic_zombie_ring */
	struct list_head zombie_mrs;	/* struct rnic_mr via zombie */

	struct list_head p2p_node;	/* in the GPUDirect registry (rnic_p2p.c) */

	struct rnic_ibdev *ib;		/* the ib_core device (rnic_ib.c), NULL if none */
	struct rnic_eth *eth;		/* the netdev's rings (rnic_netdev.c) for the irq hook */
	struct xarray ib_cqs;		/* struct rnic_ib_cq by CQN, for their interrupts */
	struct xarray ib_qps;		/* struct rnic_ib_qp by QPN, for their events */
	struct xarray ib_srqs;		/* struct rnic_ib_srq by QPN, for their events */
	/* the event queue (minor 11; NULL: none), taken by event_work: rnic_ib_events.c */
	struct rnic_eqe *eq;
	dma_addr_t eq_dma;
	u32 eq_ci;			/* free-running consumer index */
	struct work_struct event_work;
	atomic_t fatal_event;		/* IB_EVENT_DEVICE_FATAL to deliver */
	struct xarray ring_maps;	/* struct rnic_ring_map by ring page: user-mapped rings */
};

/* nic->flags: reads of the ID register returned all-ones (the device is gone). */
#define RNIC_NIC_GONE		0

/* rnic_main.c: the node index from rnic_emu.node=N, or -1 */
extern int rnic_node;

static inline struct rnic_nic *to_nic(struct rnic_dev *rd)
{
	return container_of(rd, struct rnic_nic, rd);
}

/* Contract minor 13: UC QPs (rnic_qp_ctx.dest_qpn bits [31:24] name the service). */
static inline bool rnic_nic_uc(const struct rnic_nic *nic)
{
	return rnic_version_minor(nic->rd.version) >= 13;
}

/* Contract minor 14: IBTA 1.5 RDMA FLUSH and ATOMIC WRITE, the ACCESS_FLUSH_* bits. */
static inline bool rnic_nic_flush(const struct rnic_nic *nic)
{
	return rnic_version_minor(nic->rd.version) >= 14;
}

/* Contract minor 15: shared receive queues (QP_TYPE_SRQ, EQE_SRQ_LIMIT, EQE_QP_LAST_WQE). */
static inline bool rnic_nic_srq(const struct rnic_nic *nic)
{
	return rnic_version_minor(nic->rd.version) >= 15;
}

/* Contract minor 16: UD QPs (QP_TYPE_UD, rnic_ud_av in the send WQE, the GRH area). */
static inline bool rnic_nic_ud(const struct rnic_nic *nic)
{
	return rnic_version_minor(nic->rd.version) >= 16;
}

/* Contract minor 12: atomics, and the rd_atomic limits of a QP context. */
static inline bool rnic_nic_atomics(const struct rnic_nic *nic)
{
	return rnic_version_minor(nic->rd.version) >= 12;
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
	struct xarray srqs;		/* by QPN (an SRQ is a QPN: minor 15) */
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

/* A ring mapped into user space: see rnic_ring_map_add() in rnic_cmd.c. */
struct rnic_ring_map {
	void *ring;
	size_t size;
	dma_addr_t dma;
	bool orphaned;			/* its object is destroyed: the last unmap frees it */
	bool let_go;			/* ... and the device had let go of it */
};

/* DMA-coherent memory the device refused to give back (freed at remove()). */
struct rnic_zombie_ring {
	struct list_head node;
	void *ring;
	size_t size;
	dma_addr_t dma;
};

/* One work queue (SQ or RQ) of a QP, ring memory owned by the driver. */
struct rnic_wq {
	u32 log_size;
	u32 log_stride;
	u16 pi, ci;			/* free-running producer, consumer (slots freed) */
	void *ring;
	dma_addr_t ring_dma;
	size_t ring_bytes;
	u64 *wr_id;			/* the caller's wr_id per slot */
	unsigned long *busy;		/* per slot: a WQE is outstanding */
};

struct rnic_qp {
	u32 qpn;
	u32 qp_type;			/* RNIC_QP_TYPE_*, fixed at CREATE_QP */
	u32 qkey;			/* a UD QP's Q_Key (minor 16) */
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
	/* READs and atomics outstanding (minor 12): as requester, as responder; 1..16 */
	u8 max_rd_atomic, max_dest_rd_atomic;
	struct rnic_wq sq, rq;		/* rq: no ring when the QP receives from srq */
	struct rnic_srq *srq;
};

/*
 * A shared receive queue (minor 15, docs/verbs.md §4.2; rnic_srq.c): a QPN of service
 * QP_TYPE_SRQ whose context holds an RQ ring, a PD and the armed limit. It is in INIT from
 * creation to destruction. Only ib_core user contexts make SRQs.
 */
struct rnic_srq {
	u32 qpn;
	u32 gen;			/* tags its WQEs' wr_ids (the QPN's generation) */
	struct rnic_pd *pd;
	u32 max_sge;
	unsigned int users;		/* QPs receiving from it */
	struct rnic_wq rq;
};

struct rnic_mr {
	u32 index;
	u32 key;			/* lkey = rkey */
	u32 access;
	struct rnic_pd *pd;
	u64 iova, length;
	u32 npages;
	u32 mtt_offset;
	struct page **pages;		/* the pinned user pages (NULL for a dma-buf MR) */
	struct sg_table sgt;		/* what the device uses (the bounce pages for BOUNCE) */
	struct dma_buf_attachment *attach;	/* dma-buf MR: the pinned import */
	struct sg_table *dmabuf_sgt;	/* dma-buf MR: the exporter's mapping of the buffer */
	u32 dmabuf_first;		/* dma-buf MR: index of its first page in the buffer */
	struct mm_struct *mm;		/* pinned_vm accounting (NULL for a dma-buf MR) */
	u32 path;			/* RNIC_MR_PATH_* */
	struct pci_dev *provider;	/* GPU memory: the GPU (a reference) */
	struct page **bounce;		/* BOUNCE: npages host pages, page i mirrors pages[i] */
	enum dma_data_direction dir;	/* DMA_TO_DEVICE unless the access flags allow writes */
	bool revoked;			/* its GPU went away: unmapped, unpinned, off the device */
	bool index_held;		/* revoked, but the device refused DEREG_MR: it still holds
					 * the index and key, so the index is never reused (until
					 * the device's reset makes a new driver instance) */
	struct list_head zombie;	/* in nic->zombie_mrs when the device kept it */
};

/* rnic_verbs.c: bring-up and teardown of the engine, the interrupt hook */
int rnic_verbs_init(struct rnic_nic *nic);
void rnic_verbs_quiesce(struct rnic_nic *nic);
void rnic_verbs_fini(struct rnic_nic *nic);
bool rnic_nic_vec_event(struct rnic_dev *rd, unsigned int vec);

/* rnic_num.c: when a QP or CQ number may be reused */
enum rnic_num_kind { RNIC_NUM_QP, RNIC_NUM_CQ };
int rnic_num_init(struct rnic_nic *nic);
void rnic_num_fini(struct rnic_nic *nic);
void rnic_num_start(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n);
bool rnic_num_get(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n);
void rnic_num_put(struct rnic_nic *nic, enum rnic_num_kind kind, u32 n);

/* rnic_uctx.c: verbs contexts, the teardown of their objects, zombies */
struct rnic_ucontext *rnic_uc_open(struct rnic_nic *nic);
void rnic_uc_close(struct rnic_ucontext *uc);
void rnic_ucontext_destroy_objects(struct rnic_ucontext *uc);
void rnic_zombies_free(struct rnic_nic *nic);

/* rnic_cmd.c: commands, liveness, a context's mutex, ring memory */
int rnic_cmd(struct rnic_nic *nic, u32 op, u32 index);
bool rnic_cmd_release(struct rnic_nic *nic, u32 op, u32 index);
bool rnic_nic_alive(struct rnic_nic *nic);
bool rnic_nic_alive_ratelimited(struct rnic_nic *nic);
int rnic_uc_lock(struct rnic_ucontext *uc);
void rnic_uc_unlock(struct rnic_ucontext *uc);
void *rnic_ring_alloc(struct rnic_nic *nic, size_t size, dma_addr_t *dma);
void rnic_ring_free(struct rnic_nic *nic, void *ring, size_t size, dma_addr_t dma, bool device_let_go);
int rnic_ring_map_add(struct rnic_nic *nic, struct rnic_ring_map *m);
void rnic_ring_map_put(struct rnic_nic *nic, struct rnic_ring_map *m);

/* rnic_nic.c: drops a reference to the RNIC function (the last one frees it) */
void rnic_nic_put(struct rnic_nic *nic);

/* rnic_pd.c */
int rnic_alloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req);
int rnic_dealloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req);
void rnic_pd_free(struct rnic_ucontext *uc, struct rnic_pd *pd);

/* rnic_cq.c */
int rnic_create_cq(struct rnic_ucontext *uc, struct rnic_create_cq *req);
int rnic_destroy_cq(struct rnic_ucontext *uc, u32 cqn);
void rnic_cq_destroy(struct rnic_ucontext *uc, struct rnic_cq *cq);
void rnic_cq_put(struct rnic_cq *cq);

/* rnic_qp.c */
int rnic_create_qp(struct rnic_ucontext *uc, struct rnic_create_qp *req, struct rnic_srq *srq);
int rnic_destroy_qp(struct rnic_ucontext *uc, u32 qpn);
void rnic_qp_destroy(struct rnic_ucontext *uc, struct rnic_qp *qp);
int rnic_modify_qp(struct rnic_ucontext *uc, const struct rnic_modify_qp *req,
		   const struct rnic_qp_path *path);
int rnic_query_qp(struct rnic_ucontext *uc, struct rnic_query_qp *req);
void rnic_qp_to_err(struct rnic_ucontext *uc, struct rnic_qp *qp);
int rnic_wq_alloc(struct rnic_nic *nic, struct rnic_wq *wq, u32 entries, u32 bytes);
void rnic_wq_free(struct rnic_nic *nic, struct rnic_wq *wq, bool device_let_go);

/* rnic_srq.c */
int rnic_srq_create(struct rnic_ucontext *uc, u32 pdn, u32 max_wr, u32 max_sge, u32 limit,
		    struct rnic_srq **out);
int rnic_srq_arm(struct rnic_ucontext *uc, struct rnic_srq *srq, u32 limit);
void rnic_srq_destroy(struct rnic_ucontext *uc, struct rnic_srq *srq);

/* rnic_post.c: runs without uc->lock held (takes it per chunk of work requests) */
int rnic_post_send(struct rnic_ucontext *uc, struct rnic_post *req);
int rnic_post_recv(struct rnic_ucontext *uc, struct rnic_post *req);

/* rnic_poll.c: runs without uc->lock held */
int rnic_poll_cq(struct rnic_ucontext *uc, struct rnic_poll_cq *req);

/* rnic_mr.c: MRs over user memory, DEREG_MR, MR_SYNC (the MTT: rnic_mtt.h) */
int rnic_reg_mr(struct rnic_ucontext *uc, struct rnic_reg_mr *req);	/* without uc->lock */
int rnic_dereg_mr(struct rnic_ucontext *uc, u32 index);
int rnic_mr_sync(struct rnic_ucontext *uc, const struct rnic_mr_sync *req);
void rnic_mr_destroy(struct rnic_nic *nic, struct rnic_mr *mr);
void rnic_mr_release_mem(struct rnic_nic *nic, struct rnic_mr *mr);

/* rnic_mr_rereg.c: re-registration in place (ib_core's rereg_user_mr) */
#define RNIC_REREG_TRANS	(1U << 0)	/* req->addr, req->length */
#define RNIC_REREG_PD		(1U << 1)	/* req->pd */
#define RNIC_REREG_ACCESS	(1U << 2)	/* req->access */
int rnic_mr_rereg(struct rnic_ucontext *uc, u32 index, u32 what, struct rnic_reg_mr *req);

/* rnic_mr_dmabuf.c: dma-buf MRs, revocation of MRs over a GPU that goes away */
int rnic_reg_mr_dmabuf(struct rnic_ucontext *uc, struct rnic_reg_mr *req, int fd, u64 offset);
void rnic_nic_revoke_provider(struct rnic_nic *nic, struct pci_dev *provider);

/* rnic_ib_verbs.c: hard-irq part of a CQ vector, for the CQs of ib_core contexts */
bool rnic_ib_cq_event(struct rnic_nic *nic, unsigned int vec);

/* rnic_ib_events.c: the event queue (set up after the tables, freed after quiesce) */
int rnic_ib_events_init(struct rnic_nic *nic);
void rnic_ib_events_fini(struct rnic_nic *nic);
bool rnic_ib_events_kick(struct rnic_nic *nic);		/* hard-irq context */
void rnic_ib_events_fatal(struct rnic_nic *nic);	/* hard-irq context */
void rnic_ib_events_sync(struct rnic_nic *nic);

/* rnic_netdev_ring.c: hard-irq part of the netdev's vector (schedules its NAPI poll) */
bool rnic_netdev_irq(struct rnic_nic *nic, unsigned int vec);

/* rnic_cdev.c */
int rnic_cdev_register(struct rnic_nic *nic);
void rnic_cdev_unregister(struct rnic_nic *nic);
void rnic_cdev_kill_files(struct rnic_nic *nic);

extern const struct attribute_group rnic_nic_stats_group;

#endif /* _RNIC_VERBS_H */
