// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: ranges of a GPU's BAR1 exported as dma-bufs (GPU_EXPORT_DMABUF,
 * include/uapi/rnic_emu_gpu_uapi.h; docs/gpudirect.md).
 *
 * A buffer is [offset, offset + length) of BAR1, whose pages are the GPU's P2PDMA pages
 * (ZONE_DEVICE, registered by rnic_gpu.c). Only importers that take peer memory without
 * struct pages (allow_peer2peer) may attach. map_dma_buf builds a scatter list over those
 * pages and maps it with dma_map_sgtable() for the importer's device, the call rnic_mr_p2p.c
 * makes for a P2P MR over a p2pmem mapping: Linux's P2PDMA rules decide the same way (bus
 * addresses through a switch, a mapping through a whitelisted host bridge, or -EREMOTEIO).
 * A mapping holds a reference to the pages' dev_pagemap, so the P2PDMA teardown of a GPU
 * going away waits for it, as it waits for a pinned page.
 *
 * BAR1 never moves: pin and unpin do nothing, and the exporter never invalidates an
 * importer's mapping. A GPU going away is handled by the importers through the registry
 * (rnic_p2p.c): every RNIC revokes its MRs over the GPU, dma-buf MRs included, which
 * unmaps them. The buffer keeps a reference to the pci_dev only; once the GPU left the
 * registry, attach and map fail with -ENODEV. Not modelled: CPU access (no mmap, vmap or
 * begin_cpu_access), importers without P2P support, buffers of other exporters.
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/fcntl.h>
#include <linux/memremap.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>

#include "rnic_common.h"
#include "rnic_p2p.h"
#include "uapi/rnic_emu_gpu_uapi.h"

MODULE_IMPORT_NS("DMA_BUF");

struct rnic_gpu_dmabuf {
	struct pci_dev *pdev;		/* the GPU (a reference) */
	phys_addr_t phys;		/* CPU physical address of the range */
	u64 length;
};

/* One importer's mapping: the table and the pagemap reference it holds. */
struct rnic_gpu_dmabuf_map {
	struct sg_table sgt;
	struct dev_pagemap *pgmap;
};

static int rnic_gpu_dmabuf_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct rnic_gpu_dmabuf *buf = dmabuf->priv;

	if (!attach->peer2peer) {
		dev_warn_ratelimited(&buf->pdev->dev, "dma-buf: %s cannot import peer memory without struct pages: refused\n",
				     dev_name(attach->dev));
		return -EOPNOTSUPP;
	}
	return rnic_p2p_provider_live(buf->pdev) ? 0 : -ENODEV;
}

/* BAR1 never moves: a pinned import needs nothing more. */
static int rnic_gpu_dmabuf_pin(struct dma_buf_attachment *attach)
{
	return 0;
}

static void rnic_gpu_dmabuf_unpin(struct dma_buf_attachment *attach)
{
}

static struct sg_table *rnic_gpu_dmabuf_map(struct dma_buf_attachment *attach,
					    enum dma_data_direction dir)
{
	struct rnic_gpu_dmabuf *buf = attach->dmabuf->priv;
	struct device *dev = &buf->pdev->dev;
	unsigned long pfn = PHYS_PFN(buf->phys);
	u32 i, npages = buf->length >> PAGE_SHIFT;
	struct rnic_gpu_dmabuf_map *map;
	struct page **pages;
	int ret;

	if (!rnic_p2p_provider_live(buf->pdev))
		return ERR_PTR(-ENODEV);
	map = kzalloc(sizeof(*map), GFP_KERNEL);
	if (!map)
		return ERR_PTR(-ENOMEM);
	/* The GPU's P2PDMA memory, alive until put (its teardown waits for this reference). */
	map->pgmap = get_dev_pagemap(pfn);
	if (!map->pgmap || map->pgmap->type != MEMORY_DEVICE_PCI_P2PDMA) {
		ret = -ENODEV;
		goto err_free;
	}
	pages = kvmalloc_array(npages, sizeof(*pages), GFP_KERNEL);
	ret = -ENOMEM;
	if (!pages)
		goto err_put;
	for (i = 0; i < npages; i++)
		pages[i] = pfn_to_page(pfn + i);
	ret = sg_alloc_table_from_pages(&map->sgt, pages, npages, 0, buf->length, GFP_KERNEL);
	kvfree(pages);
	if (ret)
		goto err_put;
	/* Linux's P2PDMA distance between the GPU and the importer decides (and logs). */
	ret = dma_map_sgtable(attach->dev, &map->sgt, dir, DMA_ATTR_SKIP_CPU_SYNC);
	if (ret) {
		dev_warn_ratelimited(dev, "dma-buf: %s cannot DMA to this GPU's memory peer-to-peer: %d\n",
				     dev_name(attach->dev), ret);
		goto err_sgt;
	}
	return &map->sgt;

err_sgt:
	sg_free_table(&map->sgt);
err_put:
	put_dev_pagemap(map->pgmap);
err_free:
	kfree(map);
	return ERR_PTR(ret);
}

static void rnic_gpu_dmabuf_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
				  enum dma_data_direction dir)
{
	struct rnic_gpu_dmabuf_map *map = container_of(sgt, struct rnic_gpu_dmabuf_map, sgt);

	dma_unmap_sgtable(attach->dev, sgt, dir, DMA_ATTR_SKIP_CPU_SYNC);
	sg_free_table(sgt);
	put_dev_pagemap(map->pgmap);
	kfree(map);
}

static void rnic_gpu_dmabuf_release(struct dma_buf *dmabuf)
{
	struct rnic_gpu_dmabuf *buf = dmabuf->priv;

	pci_dev_put(buf->pdev);
	kfree(buf);
}

static const struct dma_buf_ops rnic_gpu_dmabuf_ops = {
	.attach		= rnic_gpu_dmabuf_attach,
	.pin		= rnic_gpu_dmabuf_pin,
	.unpin		= rnic_gpu_dmabuf_unpin,
	.map_dma_buf	= rnic_gpu_dmabuf_map,
	.unmap_dma_buf	= rnic_gpu_dmabuf_unmap,
	.release	= rnic_gpu_dmabuf_release,
};

int rnic_gpu_dmabuf_export(struct rnic_p2p_gpu *gpu, struct rnic_gpu_export_dmabuf *req)
{
	DEFINE_DMA_BUF_EXPORT_INFO(exp);
	struct rnic_gpu_dmabuf *buf;
	struct dma_buf *dmabuf;
	u64 end;
	int fd;

	if (req->flags & ~RNIC_GPU_DMABUF_CLOEXEC || !req->length ||
	    !PAGE_ALIGNED(req->offset) || !PAGE_ALIGNED(req->length) ||
	    check_add_overflow(req->offset, req->length, &end) || end > gpu->size ||
	    req->length >> PAGE_SHIFT > U32_MAX) {
		dev_dbg(&gpu->pdev->dev, "GPU_EXPORT_DMABUF: range 0x%llx + 0x%llx or flags 0x%x invalid (BAR1 is 0x%llx bytes)\n",
			req->offset, req->length, req->flags, (u64)gpu->size);
		return -EINVAL;
	}
	buf = kzalloc(sizeof(*buf), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	buf->pdev = pci_dev_get(gpu->pdev);
	buf->phys = gpu->phys + req->offset;
	buf->length = req->length;

	exp.ops = &rnic_gpu_dmabuf_ops;
	exp.size = req->length;
	exp.flags = O_RDWR;
	exp.priv = buf;
	dmabuf = dma_buf_export(&exp);
	if (IS_ERR(dmabuf)) {
		pci_dev_put(buf->pdev);
		kfree(buf);
		return PTR_ERR(dmabuf);
	}
	fd = dma_buf_fd(dmabuf, req->flags & RNIC_GPU_DMABUF_CLOEXEC ? O_CLOEXEC : 0);
	if (fd < 0) {
		dma_buf_put(dmabuf);	/* releases buf */
		return fd;
	}
	req->fd = fd;
	return 0;
}

struct pci_dev *rnic_gpu_dmabuf_provider(struct dma_buf *dmabuf)
{
	struct rnic_gpu_dmabuf *buf = dmabuf->priv;

	if (dmabuf->ops != &rnic_gpu_dmabuf_ops)
		return NULL;
	return pci_dev_get(buf->pdev);
}
