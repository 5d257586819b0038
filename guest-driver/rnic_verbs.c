// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: bring-up and teardown of the verbs engine (docs/verbs.md §1) and
 * the RNIC's interrupt hook; the top of the verbs core, called by the probe and remove()
 * of rnic_nic.c. Bring-up allocates the context tables, the MTT (rnic_mtt.c) and the
 * doorbell page (rnic_dbpage.c) and enables the engine.
 *
 * Teardown order: the engine is reset and stopped (rnic_verbs_quiesce) before any ring,
 * table or pinned page is freed. When the device refuses to destroy an object while it
 * runs, the object's memory goes to a zombie list and is freed only after that reset
 * (rnic_zombies_free(), rnic_uctx.c).
 *
 * The layers below: rnic_uctx.c (contexts and their teardown), the objects (rnic_pd.c,
 * rnic_cq.c, rnic_qp.c, rnic_mr*.c; posting in rnic_post.c, polling in rnic_poll.c), and
 * rnic_cmd.c (commands, liveness, ring memory) at the bottom.
 *
 * Not modelled: device hot-add of verbs state, firmware.
 */
#include <linux/dma-mapping.h>
#include <linux/io.h>
#include <linux/slab.h>

#include "rnic_dbpage.h"
#include "rnic_fault.h"
#include "rnic_mtt.h"
#include "rnic_verbs.h"

#ifdef __BIG_ENDIAN
#error "rnic-emu descriptors are little-endian and written as native structs"
#endif

/*
 * Interrupt hook (hard-irq context): vector 0 reports asynchronous errors and events, the
 * others completions (all of them, with one vector only). The netdev's rings share one of
 * the vectors (rnic_netdev.c picks it).
 */
bool rnic_nic_vec_event(struct rnic_dev *rd, unsigned int vec)
{
	struct rnic_nic *nic = to_nic(rd);
	bool eth = rnic_netdev_irq(nic, vec);
	bool eq, cq;
	u32 err;

	atomic_inc(&nic->vec_seq[vec]);
	/* CQs' vectors; with a single vector, vector 0 is theirs too. */
	cq = rnic_ib_cq_event(nic, vec);
	cq |= atomic_dec_if_positive(&nic->vec_armed[vec]) >= 0;
	if (vec != 0)
		return cq || eth;
	eq = rnic_ib_events_kick(nic);	/* the event queue may hold entries */
	err = ioread32(rd->bar0 + RNIC_REG_LAST_ERROR);
	if (!err || err == 0xffffffff)
		return eth || eq || cq;
	atomic64_inc(&nic->stats.async_errors);
	if (err >> 24 == RNIC_ASYNC_ERR_FATAL)
		rnic_ib_events_fatal(nic);	/* before the recovery unregisters */
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

/* The tables of contract minor 8 (either may be missing after a failed allocation). */
static void rnic_qp_path_free(struct rnic_nic *nic)
{
	if (nic->qp_path)
		dma_free_coherent(nic_dev(nic), nic->max_qp * sizeof(*nic->qp_path),
				  nic->qp_path, nic->qp_path_dma);
	if (nic->gid_table)
		dma_free_coherent(nic_dev(nic), RNIC_GID_TABLE_LEN * sizeof(*nic->gid_table),
				  nic->gid_table, nic->gid_table_dma);
	nic->qp_path = NULL;
	nic->gid_table = NULL;
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
	if (!nic->mr_gen || !nic->qp_gen || rnic_num_init(nic))
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

	if (rnic_version_minor(nic->rd.version) >= 8) {
		nic->qp_path = rnic_table_alloc(nic, nic->max_qp * sizeof(*nic->qp_path),
						&nic->qp_path_dma, "QP path");
		nic->gid_table = rnic_table_alloc(nic, RNIC_GID_TABLE_LEN * sizeof(*nic->gid_table),
						  &nic->gid_table_dma, "GID");
		if (!nic->qp_path || !nic->gid_table)
			goto err_qp_path;
	}

	ret = rnic_mtt_init(nic);
	if (ret)
		goto err_qp_path;

	writeq(nic->qp_ctx_dma, bar0 + QP_CTX_BASE);
	writeq(nic->cq_ctx_dma, bar0 + CQ_CTX_BASE);
	writeq(nic->mr_ctx_dma, bar0 + MR_CTX_BASE);
	writeq(nic->mtt_dma, bar0 + MTT_BASE);
	iowrite32(RNIC_MTT_ENTRIES, bar0 + MTT_ENTRIES);
	if (nic->qp_path) {
		writeq(nic->qp_path_dma, bar0 + QP_PATH_BASE);
		writeq(nic->gid_table_dma, bar0 + GID_TABLE_BASE);
	}
	iowrite32(RNIC_DMA_CTRL_ENABLE | RNIC_DMA_CTRL_INT_ENABLE | rnic_dbpage_init(nic),
		  bar0 + DMA_CTRL);
	return rnic_ib_events_init(nic);

err_qp_path:
	rnic_qp_path_free(nic);
	dma_free_coherent(nic_dev(nic), nic->max_mr * sizeof(*nic->mr_ctx), nic->mr_ctx,
			  nic->mr_ctx_dma);
err_cq_ctx:
	dma_free_coherent(nic_dev(nic), nic->max_cq * sizeof(*nic->cq_ctx), nic->cq_ctx,
			  nic->cq_ctx_dma);
err_qp_ctx:
	dma_free_coherent(nic_dev(nic), nic->max_qp * sizeof(*nic->qp_ctx), nic->qp_ctx,
			  nic->qp_ctx_dma);
err_gen:
	rnic_num_fini(nic);
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
	rnic_ib_events_fini(nic);
	rnic_dbpage_fini(nic);
	rnic_zombies_free(nic);
	rnic_mtt_fini(nic);
	rnic_qp_path_free(nic);
	dma_free_coherent(nic_dev(nic), nic->max_mr * sizeof(*nic->mr_ctx), nic->mr_ctx,
			  nic->mr_ctx_dma);
	dma_free_coherent(nic_dev(nic), nic->max_cq * sizeof(*nic->cq_ctx), nic->cq_ctx,
			  nic->cq_ctx_dma);
	dma_free_coherent(nic_dev(nic), nic->max_qp * sizeof(*nic->qp_ctx), nic->qp_ctx,
			  nic->qp_ctx_dma);
	rnic_num_fini(nic);
	kvfree(nic->qp_gen);
	kvfree(nic->mr_gen);
	ida_destroy(&nic->mr_ida);
	ida_destroy(&nic->qp_ida);
	ida_destroy(&nic->cq_ida);
	ida_destroy(&nic->pd_ida);
	mutex_destroy(&nic->zombie_lock);
	mutex_destroy(&nic->cmd_lock);
}
