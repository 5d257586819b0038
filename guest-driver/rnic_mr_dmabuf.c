// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: dma-buf MRs and the revocation of MRs over GPU memory
 * (docs/verbs.md §6, docs/gpudirect.md).
 *
 * dma-buf MRs (rnic_reg_mr_dmabuf(), ib_core's reg_user_mr_dmabuf): a GPU's buffer of
 * GPU_EXPORT_DMABUF (rnic_gpu_dmabuf.c) is attached for the RNIC and pinned, as
 * ib_umem_dmabuf_get_pinned() does; the exporter maps it with the same P2PDMA rules, so
 * the MR is a P2P MR over that GPU (path, revocation) that never bounces. Only the
 * pinning and mapping differ: everything from the PD to the device's command is shared
 * (rnic_mr_add(), rnic_mr.c), and so is the release (rnic_mr_release_mem(), which holds
 * the import's teardown).
 *
 * Revocation: a GPU going away (rnic_p2p.c) first clears its BAR1_APERTURE slots, then
 * every MR over its memory, pinned or imported, is revoked: the QPs of the MR's PD go to
 * ERROR, the MR is deregistered at the device, unmapped and unpinned (P2PDMA teardown
 * waits for those pins). The MR's number stays until DEREG_MR; its keys fail at the
 * device, MR_SYNC fails with -ENODEV.
 *
 * Above rnic_mr.c (rnic_mr.h), which never calls this file.
 */
#include <linux/dma-buf.h>
#include <linux/dma-resv.h>
#include <linux/mm.h>
#include <linux/slab.h>

#include "rnic_mr.h"
#include "rnic_verbs.h"

/*
 * The exporter never moves a GPU's BAR1 and never invalidates a mapping (rnic_gpu_dmabuf.c):
 * MRs import pinned and are revoked through the GPU registry instead (rnic_p2p.c).
 */
static void rnic_mr_dmabuf_invalidate(struct dma_buf_attachment *attach)
{
	struct rnic_mr *mr = attach->importer_priv;

	pr_warn_once("rnic_emu: dma-buf of MR %u invalidated although pinned; the MR keeps its pages until DEREG_MR\n",
		     mr->index);
}

static const struct dma_buf_attach_ops rnic_mr_dmabuf_ops = {
	.allow_peer2peer	= true,
	.invalidate_mappings	= rnic_mr_dmabuf_invalidate,
};

/*
 * Attaches the RNIC to @dmabuf, pins and maps the attachment (the exporter decides P2P or
 * refusal for the RNIC, -EREMOTEIO). Takes over the caller's reference to @dmabuf on
 * success.
 */
static int rnic_mr_dmabuf_import(struct rnic_nic *nic, struct rnic_mr *mr, struct dma_buf *dmabuf)
{
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
	int ret;

	attach = dma_buf_dynamic_attach(dmabuf, nic_dev(nic), &rnic_mr_dmabuf_ops, mr);
	if (IS_ERR(attach))
		return PTR_ERR(attach);
	dma_resv_lock(dmabuf->resv, NULL);
	ret = dma_buf_pin(attach);
	if (ret)
		goto err_unlock;
	sgt = dma_buf_map_attachment(attach, mr->dir);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		goto err_unpin;
	}
	dma_resv_unlock(dmabuf->resv);
	mr->attach = attach;
	mr->dmabuf_sgt = sgt;
	return 0;

err_unpin:
	dma_buf_unpin(attach);
err_unlock:
	dma_resv_unlock(dmabuf->resv);
	dma_buf_detach(dmabuf, attach);
	return ret;
}

/**
 * rnic_reg_mr_dmabuf() - REG_MR over [@offset, @offset + length) of a GPU's dma-buf
 * @uc: the verbs context (uc->lock not held)
 * @req: as for rnic_reg_mr(); addr is the MR's iova, whose offset in its page must be that
 *       of @offset; flags are ignored beyond their validation: a dma-buf MR never bounces
 * @fd: a dma-buf of GPU_EXPORT_DMABUF (rnic_gpu_dmabuf.c); other exporters: -EOPNOTSUPP
 * @offset: where the MR starts in the buffer
 *
 * The import is pinned; the MR is then registered as a P2P MR over the GPU's memory (path,
 * counters, revocation when the GPU goes away). An RNIC the GPU cannot reach peer-to-peer
 * gets the exporter's -EREMOTEIO.
 */
int rnic_reg_mr_dmabuf(struct rnic_ucontext *uc, struct rnic_reg_mr *req, int fd, u64 offset)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	struct dma_buf *dmabuf;
	struct rnic_mr *mr;
	const char *why;
	u64 last, end;
	int ret;

	ret = rnic_mr_check_access(dev, req);
	if (ret)
		return ret;
	if (req->length == 0 || req->length > RNIC_UAPI_MAX_MR_SIZE ||
	    check_add_overflow(req->addr, req->length - 1, &last) ||
	    check_add_overflow(offset, req->length, &end) ||
	    (offset ^ req->addr) & ~PAGE_MASK) {
		dev_warn_ratelimited(dev, "REG_MR dma-buf: offset 0x%llx, iova 0x%llx + %llu: empty, over %llu bytes, wrapping, or iova and offset differ within a page\n",
				     offset, req->addr, req->length, RNIC_UAPI_MAX_MR_SIZE);
		return -EINVAL;
	}
	dmabuf = dma_buf_get(fd);
	if (IS_ERR(dmabuf))
		return PTR_ERR(dmabuf);

	mr = kzalloc(sizeof(*mr), GFP_KERNEL_ACCOUNT);
	ret = -ENOMEM;
	why = "MR";
	if (!mr)
		goto err_put;
	mr->access = req->access;
	mr->dir = rnic_mr_writable(mr->access) ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE;
	mr->iova = req->addr;
	mr->length = req->length;
	mr->npages = (PAGE_ALIGN(end) - (offset & PAGE_MASK)) >> PAGE_SHIFT;
	mr->dmabuf_first = offset >> PAGE_SHIFT;

	why = "the buffer (not a GPU's dma-buf, or the range is outside it)";
	ret = -EOPNOTSUPP;
	mr->provider = rnic_gpu_dmabuf_provider(dmabuf);
	if (!mr->provider)
		goto err_free;
	ret = -EINVAL;
	if (end > dmabuf->size)
		goto err_free;

	why = "importing the dma-buf (peer-to-peer DMA-mapping the GPU memory)";
	ret = rnic_mr_dmabuf_import(nic, mr, dmabuf);
	if (ret)
		goto err_free;
	mr->path = rnic_p2p_path(nic->rd.pdev, mr->provider);

	ret = rnic_mr_add(uc, mr, req->pd, true, &why);
	if (ret) {
		rnic_mr_dmabuf_release(mr);	/* puts dmabuf */
		pci_dev_put(mr->provider);
		kfree(mr);
		goto err_count;
	}
	rnic_mr_done(mr, req);
	return 0;

err_free:
	pci_dev_put(mr->provider);
	kfree(mr);
err_put:
	dma_buf_put(dmabuf);
err_count:
	atomic64_inc(&nic->stats.mr_reg_failures);
	dev_warn_ratelimited(dev, "REG_MR dma-buf fd %d offset 0x%llx + %llu (access 0x%x) failed at %s: %d\n",
			     fd, offset, req->length, req->access, why, ret);
	return ret;
}

/* Revokes the MRs of one file over @provider's memory (uc->lock held). */
static unsigned int rnic_uc_revoke(struct rnic_ucontext *uc, struct pci_dev *provider)
{
	struct rnic_nic *nic = uc->nic;
	unsigned long i, j;
	unsigned int n = 0;
	struct rnic_mr *mr;
	struct rnic_qp *qp;

	lockdep_assert_held(&uc->lock);
	xa_for_each(&uc->mrs, i, mr) {
		if (mr->revoked || mr->provider != provider)
			continue;
		/* Quiesce: every QP that could name the MR (same PD) stops. */
		xa_for_each(&uc->qps, j, qp)
			if (qp->pd == mr->pd)
				rnic_qp_to_err(uc, qp);
		/*
		 * Even a refused DEREG_MR cannot reach the GPU any more: its BAR1_APERTURE slot
		 * is already cleared. The pin must go, or the GPU's removal waits forever.
		 */
		if (!rnic_cmd_release(nic, RNIC_CMD_DEREG_MR, mr->index)) {
			dev_err_ratelimited(nic_dev(nic), "revoking MR %u: the device refused DEREG_MR; unpinning anyway, the index stays out of use\n",
					    mr->index);
			mr->index_held = true;
		}
		rnic_mr_release_mem(nic, mr);
		mr->revoked = true;
		atomic64_inc(&nic->stats.revoked_mrs);
		n++;
	}
	return n;
}

/**
 * rnic_nic_revoke_provider() - revoke every MR of @nic over the memory of @provider
 * @nic: an RNIC
 * @provider: a GPU going away, already out of the registry and the aperture slots
 *
 * Called by rnic_p2p.c from the GPU's remove(); takes files_lock and each uc->lock.
 */
void rnic_nic_revoke_provider(struct rnic_nic *nic, struct pci_dev *provider)
{
	struct rnic_ucontext *uc;
	unsigned int n = 0;

	mutex_lock(&nic->files_lock);
	list_for_each_entry(uc, &nic->files, node) {
		mutex_lock(&uc->lock);
		if (!uc->dead)
			n += rnic_uc_revoke(uc, provider);
		mutex_unlock(&uc->lock);
	}
	mutex_unlock(&nic->files_lock);
	if (n)
		dev_info(nic_dev(nic), "GPU %s is going away: revoked %u MRs over its memory (their QPs moved to ERROR)\n",
			 pci_name(provider), n);
}
