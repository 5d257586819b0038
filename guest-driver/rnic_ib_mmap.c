// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: what libibverbs contexts map into user space (docs/ibverbs.md):
 * the rings of their CQs and QPs and each object's own page of the doorbell page (BAR2,
 * docs/verbs.md §3.1). Every mapping goes through ib_core's mmap entries, so the RDMA core
 * zaps them when the device goes away. A ring outlives its object while it is mapped
 * (rnic_ring_map_add() in rnic_cmd.c), and so does the number of a mapped doorbell-page
 * page (rnic_num.c): destroy and last unmap may come in either order.
 *
 * Not modelled: rings from a remapping DMA allocator (an IOMMU in the guest) are not
 * linear kernel memory and cannot be mapped; creating such a CQ or QP fails.
 */
#include <linux/mm.h>
#include <linux/slab.h>
#include <rdma/ib_verbs.h>

#include "rnic_ib.h"
#include "uapi/rnic_emu_ring.h"

static struct rnic_ib_mmap *to_rnic_mmap(struct rdma_user_mmap_entry *e)
{
	return container_of(e, struct rnic_ib_mmap, rdma);
}

static int rnic_ib_mmap_insert(struct rnic_ib_ucontext *ctx, struct rnic_ib_mmap *m,
			       size_t len, u64 *key)
{
	int ret = rdma_user_mmap_entry_insert(&ctx->ibuc, &m->rdma, PAGE_ALIGN(len));

	if (ret)
		return ret;
	*key = rdma_user_mmap_get_offset(&m->rdma);
	return 0;
}

/* Offers a CQ or QP ring for mmap; *out is removed with rnic_ib_mmap_remove(). */
int rnic_ib_mmap_ring(struct rnic_ib_ucontext *ctx, void *ring, size_t size, dma_addr_t dma,
		      u64 *key, struct rnic_ib_mmap **out)
{
	struct rnic_nic *nic = ctx->uc->nic;
	struct rnic_ib_mmap *m;
	int ret;

	if (is_vmalloc_addr(ring) || !PAGE_ALIGNED(ring)) {
		dev_warn_ratelimited(nic_dev(nic), "a ring from a remapping DMA allocator cannot be mapped to user space\n");
		return -EOPNOTSUPP;
	}
	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	m->nic = nic;
	m->ring.ring = ring;
	m->ring.size = size;
	m->ring.dma = dma;
	m->pfn = virt_to_phys(ring) >> PAGE_SHIFT;
	ret = rnic_ring_map_add(nic, &m->ring);
	if (ret)
		goto err_free;
	m->has_ring = true;
	ret = rnic_ib_mmap_insert(ctx, m, size, key);
	if (ret)
		goto err_map;
	kref_get(&nic->ref);
	*out = m;
	return 0;

err_map:
	rnic_ring_map_put(nic, &m->ring);
err_free:
	kfree(m);
	return ret;
}

/*
 * Offers the doorbell-page page of QP or CQ @num for mmap. The entry holds the number
 * (rnic_num.c) until its mmap_free: no other object gets that page while it is mapped.
 */
int rnic_ib_mmap_db(struct rnic_ib_ucontext *ctx, enum rnic_num_kind kind, u32 num, u64 *key,
		    struct rnic_ib_mmap **out)
{
	struct rnic_nic *nic = ctx->uc->nic;
	size_t offset = kind == RNIC_NUM_QP ? rnic_dbp_qp(num) : rnic_dbp_cq(num);
	struct rnic_ib_mmap *m;
	int ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m)
		return -ENOMEM;
	if (!rnic_num_get(nic, kind, num)) {
		kfree(m);
		return -EINVAL;
	}
	m->nic = nic;
	m->num_kind = kind;
	m->num = num;
	m->pfn = (pci_resource_start(nic->rd.pdev, RNIC_EMU_RNIC_DB_BAR) + offset) >> PAGE_SHIFT;
	ret = rnic_ib_mmap_insert(ctx, m, RNIC_DBP_PAGE, key);
	if (ret) {
		rnic_num_put(nic, kind, num);
		kfree(m);
		return ret;
	}
	kref_get(&nic->ref);
	*out = m;
	return 0;
}

/* No new mapping of it; what is mapped stays until unmapped (or zapped at removal). */
void rnic_ib_mmap_remove(struct rnic_ib_mmap *m)
{
	if (m)
		rdma_user_mmap_entry_remove(&m->rdma);
}

int rnic_ib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *e;
	struct rnic_ib_mmap *m;
	pgprot_t prot;
	int ret;

	e = rdma_user_mmap_entry_get(ibuc, vma);
	if (!e)
		return -EINVAL;
	m = to_rnic_mmap(e);
	/* Rings are ordinary cached memory; the doorbell page is a BAR, as the kernel maps it. */
	prot = m->has_ring ? vma->vm_page_prot : pgprot_noncached(vma->vm_page_prot);
	ret = rdma_user_mmap_io(ibuc, vma, m->pfn, e->npages << PAGE_SHIFT, prot, e);
	rdma_user_mmap_entry_put(e);
	return ret;
}

/* The entry is removed and nothing maps it any more. */
void rnic_ib_mmap_free(struct rdma_user_mmap_entry *e)
{
	struct rnic_ib_mmap *m = to_rnic_mmap(e);
	struct rnic_nic *nic = m->nic;

	if (m->has_ring)
		rnic_ring_map_put(nic, &m->ring);
	else
		rnic_num_put(nic, m->num_kind, m->num);	/* the number may be reused now */
	kfree(m);
	rnic_nic_put(nic);
}
