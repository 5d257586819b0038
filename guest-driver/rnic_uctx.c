// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: verbs contexts (README.md, "Objects and their owner"): an open
 * /dev/rnic_emuN (rnic_cdev.c) or a libibverbs context through ib_core (rnic_ib.c). A
 * context owns the PDs, CQs, QPs and MRs it creates; closing it, or remove()
 * (rnic_cdev_kill_files()), destroys them in the order the device needs: QPs, MRs, CQs,
 * PDs.
 *
 * Zombies: when the device refuses to destroy an object while it runs, the object's
 * memory is kept (rings by rnic_ring_free(), rnic_cmd.c; MRs by rnic_mr_destroy()) and
 * freed here by rnic_zombies_free(), only after remove() reset and stopped the engine
 * (rnic_verbs_quiesce(), rnic_verbs.c).
 *
 * Above the objects (rnic_pd.c, rnic_cq.c, rnic_qp.c, rnic_mr.c), which it destroys;
 * the objects take a context's mutex through rnic_uc_lock() (rnic_cmd.c), not here.
 */
#include <linux/dma-mapping.h>
#include <linux/slab.h>

#include "rnic_verbs.h"

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

/*
 * Destroys every object of a file: QPs first (the device stops using rings and MRs), then
 * SRQs (no QP receives from them now), MRs (unpinned only once no QP can reach them), CQs
 * last, then PDs. Called with uc->lock.
 */
void rnic_ucontext_destroy_objects(struct rnic_ucontext *uc)
{
	struct rnic_srq *srq;
	struct rnic_qp *qp;
	struct rnic_mr *mr;
	struct rnic_cq *cq;
	struct rnic_pd *pd;
	unsigned long i;

	lockdep_assert_held(&uc->lock);
	xa_for_each(&uc->qps, i, qp)
		rnic_qp_destroy(uc, qp);
	xa_for_each(&uc->srqs, i, srq)
		rnic_srq_destroy(uc, srq);
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
	xa_init(&uc->srqs);
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
	xa_destroy(&uc->srqs);
	xa_destroy(&uc->qps);
	xa_destroy(&uc->cqs);
	xa_destroy(&uc->pds);
	mutex_destroy(&uc->lock);
	kfree(uc);
	rnic_nic_put(nic);
}
