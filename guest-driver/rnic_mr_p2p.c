// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the DMA mapping of a pinned MR (docs/verbs.md §6,
 * docs/gpudirect.md; rnic_mr_p2p.h). Host memory is mapped as it is. For GPU memory,
 * dma_map_sgtable() on the RNIC decides from the real topology and ACS state: bus
 * addresses through a switch, or a mapping through the host bridge, or refusal
 * (-EREMOTEIO). On refusal the MR falls back to a host bounce buffer (path BOUNCE, filled
 * from the GPU memory here and synced by MR_SYNC), or with RNIC_MR_FLAG_STRICT_P2P the
 * registration fails.
 */
#include <linux/dma-mapping.h>
#include <linux/highmem.h>
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/slab.h>

#include "rnic_mr_p2p.h"
#include "rnic_verbs.h"

/* Copies [off, off + len) of the MR (from its iova) between GPU memory and bounce pages. */
static void rnic_mr_bounce_copy(struct rnic_mr *mr, u64 off, u64 len, bool to_bounce)
{
	u64 pos = (mr->iova & ~PAGE_MASK) + off;

	while (len) {
		u32 i = pos >> PAGE_SHIFT;
		size_t in = pos & ~PAGE_MASK;
		size_t chunk = min_t(u64, PAGE_SIZE - in, len);
		/* P2PDMA pages are ZONE_DEVICE memory in the kernel's linear map. */
		void __iomem *gpu = (void __force __iomem *)page_address(mr->pages[i]) + in;
		u8 *host = kmap_local_page(mr->bounce[i]);

		/* Uncached device memory (a BAR): I/O accessors, not memcpy. */
		if (to_bounce)
			memcpy_fromio(host + in, gpu, chunk);
		else
			memcpy_toio(gpu, host + in, chunk);
		kunmap_local(host);
		pos += chunk;
		len -= chunk;
		if (!(i & 255))
			cond_resched();
	}
}

/*
 * MR_SYNC of a bounce MR: the bounce pages are a streaming DMA mapping the device owns, so
 * the CPU takes them (dma_sync_sgtable_for_cpu: under swiotlb, what the device wrote comes
 * back from the bounce slots), copies, and hands them back (dma_sync_sgtable_for_device:
 * what the CPU wrote goes out). Without the syncs the copy saw stale data wherever the
 * DMA layer bounces (swiotlb=force, SEV/TDX guests).
 */
void rnic_mr_bounce_sync(struct rnic_nic *nic, struct rnic_mr *mr, u64 off, u64 len,
			 bool to_bounce)
{
	struct device *dev = nic_dev(nic);

	dma_sync_sgtable_for_cpu(dev, &mr->sgt, mr->dir);
	rnic_mr_bounce_copy(mr, off, len, to_bounce);
	dma_sync_sgtable_for_device(dev, &mr->sgt, mr->dir);
}

static void rnic_mr_bounce_free(struct rnic_nic *nic, struct rnic_mr *mr)
{
	u32 i;

	for (i = 0; i < mr->npages && mr->bounce[i]; i++)
		__free_page(mr->bounce[i]);
	atomic64_sub(i, &nic->stats.mr_bounce_pages);
	kvfree(mr->bounce);
	mr->bounce = NULL;
}

/*
 * The fallback when the RNIC cannot reach the GPU memory peer-to-peer: host pages of the
 * MR's size, filled from the GPU memory, DMA-mapped into mr->sgt.
 */
static int rnic_mr_bounce_setup(struct rnic_nic *nic, struct rnic_mr *mr)
{
	struct device *dev = nic_dev(nic);
	u32 i;
	int ret;

	mr->bounce = kvcalloc(mr->npages, sizeof(*mr->bounce), GFP_KERNEL);
	if (!mr->bounce)
		return -ENOMEM;
	for (i = 0; i < mr->npages; i++) {
		mr->bounce[i] = alloc_page(GFP_KERNEL);
		if (!mr->bounce[i]) {
			ret = -ENOMEM;
			goto err_free;
		}
		atomic64_inc(&nic->stats.mr_bounce_pages);
	}
	rnic_mr_bounce_copy(mr, 0, mr->length, true);

	ret = sg_alloc_table_from_pages(&mr->sgt, mr->bounce, mr->npages, 0,
					(unsigned long)mr->npages << PAGE_SHIFT, GFP_KERNEL);
	if (ret)
		goto err_free;
	ret = dma_map_sgtable(dev, &mr->sgt, mr->dir, 0);
	if (ret) {
		sg_free_table(&mr->sgt);
		goto err_free;
	}
	return 0;

err_free:
	rnic_mr_bounce_free(nic, mr);
	return ret;
}

/*
 * Builds and maps mr->sgt over the pinned pages. GPU memory that Linux will not map for
 * the RNIC falls back to a bounce buffer unless @strict.
 */
int rnic_mr_map(struct rnic_nic *nic, struct rnic_mr *mr, bool strict, const char **why)
{
	struct device *dev = nic_dev(nic);
	int ret;

	*why = "building the scatter list";
	ret = sg_alloc_table_from_pages(&mr->sgt, mr->pages, mr->npages, 0,
					(unsigned long)mr->npages << PAGE_SHIFT, GFP_KERNEL);
	if (ret)
		return ret;

	*why = "DMA-mapping the pages";
	ret = dma_map_sgtable(dev, &mr->sgt, mr->dir, 0);
	if (!ret) {
		mr->path = mr->provider ? rnic_p2p_path(nic->rd.pdev, mr->provider) :
			   RNIC_MR_PATH_HOST;
		return 0;
	}
	sg_free_table(&mr->sgt);
	if (!mr->provider)
		return ret;

	if (strict) {
		dev_err_ratelimited(dev, "REG_MR (strict P2P): RNIC %s cannot DMA to GPU %s memory peer-to-peer: %d\n",
				    pci_name(nic->rd.pdev), pci_name(mr->provider), ret);
		*why = "peer-to-peer DMA-mapping the GPU memory (strict)";
		return ret;
	}
	dev_warn_ratelimited(dev, "REG_MR: RNIC %s cannot DMA to GPU %s memory peer-to-peer (%d): using a host bounce buffer of %u pages\n",
			     pci_name(nic->rd.pdev), pci_name(mr->provider), ret, mr->npages);
	atomic64_inc(&nic->stats.p2p_fallbacks);
	*why = "the host bounce buffer";
	ret = rnic_mr_bounce_setup(nic, mr);
	if (ret)
		return ret;
	mr->path = RNIC_MR_PATH_BOUNCE;
	return 0;
}

void rnic_mr_unmap(struct rnic_nic *nic, struct rnic_mr *mr)
{
	dma_unmap_sgtable(nic_dev(nic), &mr->sgt, mr->dir, 0);
	sg_free_table(&mr->sgt);
	if (mr->bounce)
		rnic_mr_bounce_free(nic, mr);
}
