// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: verbs engine bring-up and teardown, device commands, the
 * interrupt hook, surprise-removal detection, ring memory, and the teardown of one open
 * file's objects (docs/verbs.md §1-2). The objects themselves live in rnic_pd.c,
 * rnic_cq.c, rnic_qp.c, rnic_mr.c; posting in rnic_post.c, polling in rnic_poll.c.
 *
 * Teardown order: the engine is reset and stopped (rnic_verbs_quiesce) before any ring,
 * table or pinned page is freed. When the device refuses to destroy an object while it
 * runs, the object's memory goes to a zombie list and is freed only after that reset.
 *
 * Not modelled: device hot-add of verbs state, firmware; a device that answers all-ones
 * (its server died, or it was surprise-removed) is detected, logged once and every later
 * call fails with -ENODEV.
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/jiffies.h>
#include <linux/slab.h>

#include "rnic_dbpage.h"
#include "rnic_fault.h"
#include "rnic_verbs.h"

#ifdef __BIG_ENDIAN
#error "rnic-emu descriptors are little-endian and written as native structs"
#endif

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
	[RNIC_CMD_ERR_FATAL]		= "FATAL",
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
 * rnic_nic_alive() - whether the RNIC still answers
 * @nic: the RNIC
 *
 * A function whose server died or that was surprise-removed reads all-ones. The first
 * time the ID register does, the RNIC is marked gone and that is logged once; from then
 * on every call fails with -ENODEV and remove() frees everything without commands.
 */
bool rnic_nic_alive(struct rnic_nic *nic)
{
	if (test_bit(RNIC_NIC_GONE, &nic->flags))
		return false;
	if (!rnic_dev_reads_ones(&nic->rd, RNIC_REG_ID))
		return true;
	if (!test_and_set_bit(RNIC_NIC_GONE, &nic->flags)) {
		dev_err(nic_dev(nic), "RNIC not responding (ID register reads 0xffffffff): device gone, calls now fail with -ENODEV\n");
		rnic_fault_gone(nic);
	}
	wake_up_all(&nic->rd.irq_wq);
	return false;
}

/* rnic_nic_alive(), but reading the register at most every RNIC_ALIVE_CHECK_MS. */
bool rnic_nic_alive_ratelimited(struct rnic_nic *nic)
{
	unsigned long next = READ_ONCE(nic->next_alive_check);

	if (test_bit(RNIC_NIC_GONE, &nic->flags))
		return false;
	if (time_before(jiffies, next))
		return true;
	WRITE_ONCE(nic->next_alive_check, jiffies + msecs_to_jiffies(RNIC_ALIVE_CHECK_MS));
	if (!rnic_nic_alive(nic))
		return false;
	rnic_fault_check_status(nic);	/* a fatal state whose interrupt never came */
	return true;
}

/**
 * rnic_cmd() - run one device command (docs/verbs.md §2)
 * @nic: the RNIC; the caller holds nic->cmd_lock and has written the object's context
 * @op: RNIC_CMD_*
 * @index: object index
 *
 * Return: 0, or the command's error as a negative errno (logged, rate-limited); -ENODEV
 * once the engine is stopped or the device is gone.
 */
int rnic_cmd(struct rnic_nic *nic, u32 op, u32 index)
{
	void __iomem *bar0 = nic->rd.bar0;
	u32 status;

	lockdep_assert_held(&nic->cmd_lock);
	if (nic->quiesced || test_bit(RNIC_NIC_GONE, &nic->flags))
		return -ENODEV;
	iowrite32(op << RNIC_CMD_OP_SHIFT | index, bar0 + RNIC_REG_CMD);
	status = ioread32(bar0 + RNIC_REG_CMD_STATUS);
	if (status == RNIC_CMD_OK)
		return 0;
	if (status == 0xffffffff && !rnic_nic_alive(nic))
		return -ENODEV;
	status = rnic_fault_cmd_status(nic, op, index, status);	/* BUSY, FATAL: rnic_fault.c */
	if (status == RNIC_CMD_OK)
		return 0;
	if (status == RNIC_CMD_BUSY)
		return -ETIMEDOUT;

	atomic64_inc(&nic->stats.cmd_errors);
	dev_warn_ratelimited(nic_dev(nic), "command %s index %u failed: %s (%u)\n",
			     op < ARRAY_SIZE(rnic_cmd_names) && rnic_cmd_names[op] ?
			     rnic_cmd_names[op] : "?", index,
			     status < ARRAY_SIZE(rnic_cmd_err_names) && rnic_cmd_err_names[status] ?
			     rnic_cmd_err_names[status] : "unknown", status);
	return rnic_cmd_errno(status);
}

/**
 * rnic_cmd_release() - run a destroy command; may the object's memory be freed?
 * @nic: the RNIC (cmd_lock not held)
 * @op: RNIC_CMD_DESTROY_QP, RNIC_CMD_DESTROY_CQ or RNIC_CMD_DEREG_MR
 * @index: object index
 *
 * Return: true when the device no longer uses the object: the command succeeded, the
 * device did not know it (NOT_FOUND), the engine was already reset and stopped, or the
 * device is gone. False when it refused: the caller must keep the memory (zombie).
 */
bool rnic_cmd_release(struct rnic_nic *nic, u32 op, u32 index)
{
	int ret;

	mutex_lock(&nic->cmd_lock);
	ret = rnic_cmd(nic, op, index);
	mutex_unlock(&nic->cmd_lock);
	return !ret || ret == -ENOENT || ret == -ENODEV;
}

/* Interrupt hook (hard-irq context): vector 0 reports asynchronous errors, all count. */
bool rnic_nic_vec_event(struct rnic_dev *rd, unsigned int vec)
{
	struct rnic_nic *nic = to_nic(rd);
	u32 err;

	atomic_inc(&nic->vec_seq[vec]);
	if (vec != 0) {
		bool ib = rnic_ib_cq_event(nic, vec);

		return atomic_dec_if_positive(&nic->vec_armed[vec]) >= 0 || ib;
	}
	err = ioread32(rd->bar0 + RNIC_REG_LAST_ERROR);
	if (!err || err == 0xffffffff)
		return false;
	atomic64_inc(&nic->stats.async_errors);
	if (rnic_fault_async(nic, err))
		return true;
	dev_warn_ratelimited(&rd->pdev->dev, "asynchronous error: %s, object %u\n",
			     err >> 24 == RNIC_ASYNC_ERR_CQ_OVERFLOW ? "CQ overflow" :
			     err >> 24 == RNIC_ASYNC_ERR_QP ? "QP entered ERROR" :
			     err >> 24 == RNIC_ASYNC_ERR_APERTURE ?
			     "BAR1_APERTURE slot names no GPU BAR1" : "unknown code",
			     err & 0xffffff);
	return true;
}

/* Ring memory (QP and CQ rings): bounded, never warns, charged to the caller's memcg. */
void *rnic_ring_alloc(struct rnic_nic *nic, size_t size, dma_addr_t *dma)
{
	if (size > RNIC_MAX_RING_BYTES)
		return NULL;
	return dma_alloc_coherent(nic_dev(nic), size, dma, RNIC_RING_GFP);
}

/*
 * Rings mapped into user space (rnic_ib_mmap.c) are freed by whichever comes last: their
 * object's destruction (rnic_ring_free()) or their last unmap (rnic_ring_map_put()), so a
 * process that keeps a mapping after destroying the object never sees freed memory.
 */
int rnic_ring_map_add(struct rnic_nic *nic, struct rnic_ring_map *m)
{
	return xa_insert(&nic->ring_maps, (unsigned long)m->ring >> PAGE_SHIFT, m, GFP_KERNEL);
}

/* rnic_ring_free() of a mapped ring: the last unmap frees it. True if @ring is mapped. */
static bool rnic_ring_map_orphan(struct rnic_nic *nic, void *ring, bool device_let_go)
{
	struct rnic_ring_map *m;

	xa_lock(&nic->ring_maps);
	m = xa_load(&nic->ring_maps, (unsigned long)ring >> PAGE_SHIFT);
	if (m) {
		m->orphaned = true;
		m->let_go = device_let_go;
		__xa_erase(&nic->ring_maps, (unsigned long)ring >> PAGE_SHIFT);
	}
	xa_unlock(&nic->ring_maps);
	return m;
}

/* The last unmap of a ring: frees it if its object is gone already. */
void rnic_ring_map_put(struct rnic_nic *nic, struct rnic_ring_map *m)
{
	bool orphaned;

	xa_lock(&nic->ring_maps);
	orphaned = m->orphaned;
	if (!orphaned)
		__xa_erase(&nic->ring_maps, (unsigned long)m->ring >> PAGE_SHIFT);
	xa_unlock(&nic->ring_maps);
	if (orphaned)
		rnic_ring_free(nic, m->ring, m->size, m->dma, m->let_go);
}

/* Frees a ring, or keeps it on the zombie list when the device did not let go of it. */
void rnic_ring_free(struct rnic_nic *nic, void *ring, size_t size, dma_addr_t dma,
		    bool device_let_go)
{
	struct rnic_zombie_ring *z;

	if (!ring || rnic_ring_map_orphan(nic, ring, device_let_go))
		return;
	if (device_let_go) {
		dma_free_coherent(nic_dev(nic), size, ring, dma);
		return;
	}
	atomic64_add(size, &nic->stats.zombie_bytes);
	z = kmalloc(sizeof(*z), GFP_KERNEL | __GFP_NOFAIL);
	z->ring = ring;
	z->size = size;
	z->dma = dma;
	mutex_lock(&nic->zombie_lock);
	list_add(&z->node, &nic->zombie_rings);
	mutex_unlock(&nic->zombie_lock);
	dev_warn_ratelimited(nic_dev(nic), "the device refused to release a ring of %zu bytes: kept until the device is removed\n",
			     size);
}

/* Frees what the device kept. Only after rnic_verbs_quiesce(). */
void rnic_zombies_free(struct rnic_nic *nic)
{
	struct rnic_zombie_ring *z, *zt;
	struct rnic_mr *mr, *mt;

	WARN_ON_ONCE(!nic->quiesced);
	mutex_lock(&nic->zombie_lock);
	list_for_each_entry_safe(z, zt, &nic->zombie_rings, node) {
		list_del(&z->node);
		dma_free_coherent(nic_dev(nic), z->size, z->ring, z->dma);
		kfree(z);
	}
	list_for_each_entry_safe(mr, mt, &nic->zombie_mrs, zombie) {
		list_del(&mr->zombie);
		rnic_mr_release_mem(nic, mr);
		kfree(mr);
	}
	mutex_unlock(&nic->zombie_lock);
	atomic64_set(&nic->stats.zombie_bytes, 0);
}

static void *rnic_table_alloc(struct rnic_nic *nic, size_t size, dma_addr_t *dma,
			      const char *what)
{
	void *p = NULL;

	if (size <= RNIC_MAX_TABLE_BYTES)
		p = dma_alloc_coherent(nic_dev(nic), size, dma, GFP_KERNEL | __GFP_NOWARN);
	if (!p)
		dev_err(nic_dev(nic), "cannot allocate the %s table (%zu bytes of DMA memory)\n",
			what, size);
	return p;
}

/**
 * rnic_verbs_init() - context tables, MTT and DMA_CTRL (docs/verbs.md §1)
 * @nic: the RNIC, with BAR0 mapped, limits read (and bounded) and interrupts set up
 *
 * Return: 0, or a negative errno with everything undone.
 */
int rnic_verbs_init(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;
	int ret = -ENOMEM;

	mutex_init(&nic->cmd_lock);
	mutex_init(&nic->zombie_lock);
	INIT_LIST_HEAD(&nic->zombie_rings);
	INIT_LIST_HEAD(&nic->zombie_mrs);
	xa_init(&nic->ring_maps);
	xa_init(&nic->ib_cqs);
	ida_init(&nic->pd_ida);
	ida_init(&nic->cq_ida);
	ida_init(&nic->qp_ida);
	ida_init(&nic->mr_ida);

	nic->mr_gen = kvcalloc(nic->max_mr, sizeof(*nic->mr_gen), GFP_KERNEL);
	nic->qp_gen = kvcalloc(nic->max_qp, sizeof(*nic->qp_gen), GFP_KERNEL);
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
	kvfree(nic->qp_gen);
	kvfree(nic->mr_gen);
	mutex_destroy(&nic->zombie_lock);
	mutex_destroy(&nic->cmd_lock);
	return ret;
}

/*
 * Resets the engine and stops its DMA, so that it forgets every table, ring and MR; no
 * command runs afterwards. The first step of remove(), before anything is freed.
 */
void rnic_verbs_quiesce(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;

	mutex_lock(&nic->cmd_lock);
	/* The reset re-enables DMA_CTRL (its reset value): stop the engine after it. */
	iowrite32(RNIC_RESET_MAGIC, bar0 + RNIC_REG_RESET);
	iowrite32(0, bar0 + DMA_CTRL);
	(void)ioread32(bar0 + RNIC_REG_STATUS);	/* the writes have reached the device */
	nic->quiesced = true;
	mutex_unlock(&nic->cmd_lock);
}

/* Undoes rnic_verbs_init() after rnic_verbs_quiesce(); every object is already gone. */
void rnic_verbs_fini(struct rnic_nic *nic)
{
	if (!nic->quiesced)
		rnic_verbs_quiesce(nic);
	rnic_dbpage_fini(nic);
	rnic_zombies_free(nic);
	rnic_mtt_fini(nic);
	dma_free_coherent(nic_dev(nic), nic->max_mr * sizeof(*nic->mr_ctx), nic->mr_ctx,
			  nic->mr_ctx_dma);
	dma_free_coherent(nic_dev(nic), nic->max_cq * sizeof(*nic->cq_ctx), nic->cq_ctx,
			  nic->cq_ctx_dma);
	dma_free_coherent(nic_dev(nic), nic->max_qp * sizeof(*nic->qp_ctx), nic->qp_ctx,
			  nic->qp_ctx_dma);
	kvfree(nic->qp_gen);
	kvfree(nic->mr_gen);
	ida_destroy(&nic->mr_ida);
	ida_destroy(&nic->qp_ida);
	ida_destroy(&nic->cq_ida);
	ida_destroy(&nic->pd_ida);
	mutex_destroy(&nic->zombie_lock);
	mutex_destroy(&nic->cmd_lock);
}

/* Takes the file's mutex for an ioctl: -EINTR on a signal, -ENODEV once the RNIC is gone. */
int rnic_uc_lock(struct rnic_ucontext *uc)
{
	int ret = mutex_lock_interruptible(&uc->lock);

	if (ret)
		return ret;
	if (uc->dead || test_bit(RNIC_NIC_GONE, &uc->nic->flags)) {
		mutex_unlock(&uc->lock);
		return -ENODEV;
	}
	return 0;
}

void rnic_uc_unlock(struct rnic_ucontext *uc)
{
	mutex_unlock(&uc->lock);
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

	lockdep_assert_held(&uc->lock);
	xa_for_each(&uc->qps, i, qp)
		rnic_qp_destroy(uc, qp);
	xa_for_each(&uc->mrs, i, mr) {
		xa_erase(&uc->mrs, i);
		rnic_mr_destroy(uc->nic, mr);
	}
	xa_for_each(&uc->cqs, i, cq)
		rnic_cq_destroy(uc, cq);
	xa_for_each(&uc->pds, i, pd)
		rnic_pd_free(uc, pd);
}

/*
 * A new verbs context (an open /dev/rnic_emuN, or a libibverbs context through ib_core,
 * rnic_ib.c): owns its PDs, CQs, QPs and MRs; -ENODEV once the RNIC is being removed.
 */
struct rnic_ucontext *rnic_uc_open(struct rnic_nic *nic)
{
	struct rnic_ucontext *uc;

	uc = kzalloc(sizeof(*uc), GFP_KERNEL);
	if (!uc)
		return ERR_PTR(-ENOMEM);
	uc->nic = nic;
	mutex_init(&uc->lock);
	xa_init(&uc->pds);
	xa_init(&uc->cqs);
	xa_init(&uc->qps);
	xa_init(&uc->mrs);

	mutex_lock(&nic->files_lock);
	if (nic->dead) {
		mutex_unlock(&nic->files_lock);
		kfree(uc);
		return ERR_PTR(-ENODEV);
	}
	kref_get(&nic->ref);
	list_add(&uc->node, &nic->files);
	mutex_unlock(&nic->files_lock);
	return uc;
}

/* Destroys what the context still owns and frees it. */
void rnic_uc_close(struct rnic_ucontext *uc)
{
	struct rnic_nic *nic = uc->nic;

	/* files_lock keeps remove() from freeing the tables while this tears down. */
	mutex_lock(&nic->files_lock);
	mutex_lock(&uc->lock);
	if (!uc->dead)
		rnic_ucontext_destroy_objects(uc);
	list_del(&uc->node);
	mutex_unlock(&uc->lock);
	mutex_unlock(&nic->files_lock);

	xa_destroy(&uc->mrs);
	xa_destroy(&uc->qps);
	xa_destroy(&uc->cqs);
	xa_destroy(&uc->pds);
	mutex_destroy(&uc->lock);
	kfree(uc);
	rnic_nic_put(nic);
}
