// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: memory regions over user memory (docs/verbs.md §6): pinning, the
 * registration every MR goes through, DEREG_MR and MR_SYNC.
 *
 * REG_MR pins the user pages, has them mapped for the RNIC (rnic_mr_p2p.c), and writes
 * the bus address of every PAGE_SIZE page into a range of MTT entries (rnic_mtt.c). The
 * MR's iova is the user address, so the first MTT entry is the page holding it. Keys are
 * index << 8 | generation: the generation byte of an index changes on every reuse, so
 * keys of a deregistered MR fail at the device.
 *
 * GPU memory (docs/gpudirect.md): P2PDMA pages (a mapping of a GPU's p2pmem/allocate)
 * cannot be pinned with FOLL_LONGTERM on this kernel, and without FOLL_PCI_P2PDMA gup
 * refuses them. So an MR is pinned long-term first, and when that fails the range is
 * pinned again with FOLL_PCI_P2PDMA (short-term semantics; the pin still lasts until
 * DEREG_MR): if every page is P2PDMA memory of one registered GPU, the MR is GPU memory.
 * How it is then mapped (peer-to-peer or a bounce buffer) is rnic_mr_p2p.c's.
 *
 * Pages are mapped with the direction the access flags allow: DMA_TO_DEVICE unless
 * LOCAL_WRITE or REMOTE_WRITE was asked for (and MR_SYNC FROM_BOUNCE, which writes the GPU
 * pages, is refused on such an MR). Pinning runs before the file's mutex is taken.
 *
 * dma-buf MRs (rnic_mr_dmabuf.c) share everything from the PD to the device's command
 * (rnic_mr_add()) and the release (rnic_mr_release_mem(), with the import's teardown,
 * rnic_mr_dmabuf_release(), here so that this file never calls up into rnic_mr_dmabuf.c).
 * Revocation of MRs over a GPU that goes away is in rnic_mr_dmabuf.c too.
 */
#include <linux/dma-buf.h>
#include <linux/dma-resv.h>
#include <linux/io.h>
#include <linux/memremap.h>
#include <linux/mm.h>
#include <linux/pci-p2pdma.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "rnic_mr.h"
#include "rnic_mr_p2p.h"
#include "rnic_mtt.h"
#include "rnic_verbs.h"

static_assert(PAGE_SHIFT == RNIC_MR_PAGE_SHIFT);

/*
 * gup flags for an MR's pages. FOLL_LONGTERM is right for ordinary memory; P2PDMA pages
 * need FOLL_PCI_P2PDMA and cannot be pinned long-term on this kernel (-EINVAL).
 */
static unsigned int rnic_mr_gup_flags(u32 access, bool p2p)
{
	unsigned int flags = p2p ? FOLL_PCI_P2PDMA : FOLL_LONGTERM;

	if (rnic_mr_writable(access))
		flags |= FOLL_WRITE;
	return flags;
}

/* Charges @npages to the caller's pinned_vm, within RLIMIT_MEMLOCK unless CAP_IPC_LOCK. */
static int rnic_mr_account(struct rnic_mr *mr)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	s64 pinned;

	mr->mm = current->mm;
	mmgrab(mr->mm);
	pinned = atomic64_add_return(mr->npages, &mr->mm->pinned_vm);
	if (pinned > limit && !capable(CAP_IPC_LOCK)) {
		atomic64_sub(mr->npages, &mr->mm->pinned_vm);
		mmdrop(mr->mm);
		mr->mm = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void rnic_mr_unaccount(struct rnic_mr *mr)
{
	atomic64_sub(mr->npages, &mr->mm->pinned_vm);
	mmdrop(mr->mm);
}

static int rnic_mr_pin(struct rnic_mr *mr, unsigned long start, u32 *pinned, bool p2p)
{
	unsigned int flags = rnic_mr_gup_flags(mr->access, p2p);
	int ret;

	*pinned = 0;
	while (*pinned < mr->npages) {
		ret = pin_user_pages_fast(start + ((unsigned long)*pinned << PAGE_SHIFT),
					  mr->npages - *pinned, flags, mr->pages + *pinned);
		if (ret <= 0)
			return ret ? ret : -EFAULT;
		*pinned += ret;
	}
	return 0;
}

/*
 * After a long-term pin failed with @err: pins the range again allowing P2PDMA pages and
 * keeps that pin only if every page is P2PDMA memory of one registered GPU (mr->provider).
 * Mixed P2PDMA and ordinary pages: -EINVAL. Otherwise the range was not GPU memory and
 * @err stands.
 */
static int rnic_mr_pin_p2p(struct rnic_nic *nic, struct rnic_mr *mr, unsigned long start,
			   u32 *pinned, int err, const char **why)
{
	struct device *dev = nic_dev(nic);
	struct pci_dev *provider = NULL, *p;
	u32 i, n_p2p = 0;
	int ret;

	ret = rnic_mr_pin(mr, start, pinned, true);
	if (ret) {
		unpin_user_pages(mr->pages, *pinned);
		*pinned = 0;
		return err;
	}
	for (i = 0; i < mr->npages; i++)
		n_p2p += is_pci_p2pdma_page(mr->pages[i]);
	if (n_p2p == 0) {
		ret = err;
		goto err_unpin;
	}
	if (n_p2p != mr->npages) {
		*why = "checking the pages (GPU memory mixed with ordinary memory)";
		ret = -EINVAL;
		goto err_unpin;
	}

	*why = "finding the GPU that provides the memory";
	for (i = 0; i < mr->npages; i++) {
		phys_addr_t phys = page_to_phys(mr->pages[i]);

		if (provider && phys >= pci_resource_start(provider, RNIC_EMU_GPU_MEM_BAR) &&
		    phys <= pci_resource_end(provider, RNIC_EMU_GPU_MEM_BAR))
			continue;
		p = rnic_p2p_find_provider(phys);
		if (!p || (provider && p != provider)) {
			dev_warn_ratelimited(dev, "REG_MR: page %u (phys %pa) is %s\n", i, &phys,
					     p ? "memory of a second GPU" :
					     "P2PDMA memory of no rnic-emu GPU");
			pci_dev_put(p);
			ret = -EINVAL;
			goto err_unpin;
		}
		provider = p;
	}
	mr->provider = provider;
	return 0;

err_unpin:
	pci_dev_put(provider);
	unpin_user_pages(mr->pages, *pinned);
	*pinned = 0;
	return ret;
}

static void rnic_mr_unpin(struct rnic_mr *mr)
{
	/* Device memory is not file-backed: nothing to mark dirty. */
	unpin_user_pages_dirty_lock(mr->pages, mr->npages,
				    !mr->provider && rnic_mr_writable(mr->access));
	pci_dev_put(mr->provider);
	mr->provider = NULL;
}

/* Writes the bus address of each page of the MR's mapped table into its MTT range. */
static int rnic_mr_fill_mtt(struct rnic_nic *nic, struct rnic_mr *mr)
{
	struct sg_table *sgt = mr->attach ? mr->dmabuf_sgt : &mr->sgt;
	struct sg_dma_page_iter iter;
	u32 i = 0;

	/* A dma-buf MR starts at page dmabuf_first of the buffer's table (0 otherwise). */
	for_each_sgtable_dma_page(sgt, &iter, mr->dmabuf_first) {
		if (i == mr->npages)
			break;	/* a dma-buf's table goes on past the MR */
		nic->mtt[mr->mtt_offset + i] = cpu_to_le64(sg_page_iter_dma_address(&iter));
		i++;
	}
	return i == mr->npages ? 0 : -EIO;
}

/*
 * The translation the device reads at REG_MR: @mr's pinned pages mapped (@strict as in
 * rnic_mr_map(); a dma-buf comes mapped) and their bus addresses in a new MTT range. On
 * failure nothing of it is left.
 */
int rnic_mr_translate(struct rnic_nic *nic, struct rnic_mr *mr, bool strict, const char **why)
{
	int ret;

	if (!mr->attach) {
		ret = rnic_mr_map(nic, mr, strict, why);
		if (ret)
			return ret;
	}
	*why = "MTT space";
	ret = rnic_mtt_alloc(nic, mr->npages, &mr->mtt_offset);
	if (ret)
		goto err_unmap;
	*why = "filling the MTT";
	ret = rnic_mr_fill_mtt(nic, mr);
	if (ret)
		goto err_mtt;
	return 0;

err_mtt:
	rnic_mtt_free(nic, mr->mtt_offset, mr->npages);
err_unmap:
	if (!mr->attach)
		rnic_mr_unmap(nic, mr);
	return ret;
}

/* Undoes rnic_mr_translate(). */
void rnic_mr_untranslate(struct rnic_nic *nic, struct rnic_mr *mr)
{
	rnic_mtt_free(nic, mr->mtt_offset, mr->npages);
	if (!mr->attach)
		rnic_mr_unmap(nic, mr);
}

/*
 * Unmaps, unpins and detaches a dma-buf MR's import and drops its buffer reference. The
 * import itself is rnic_mr_dmabuf.c's; its teardown is here for rnic_mr_release_mem().
 */
void rnic_mr_dmabuf_release(struct rnic_mr *mr)
{
	struct dma_buf *dmabuf = mr->attach->dmabuf;

	dma_resv_lock(dmabuf->resv, NULL);
	dma_buf_unmap_attachment(mr->attach, mr->dmabuf_sgt, mr->dir);
	dma_buf_unpin(mr->attach);
	dma_resv_unlock(dmabuf->resv);
	dma_buf_detach(dmabuf, mr->attach);
	dma_buf_put(dmabuf);
	mr->attach = NULL;
	mr->dmabuf_sgt = NULL;
}

/*
 * The device's REG_MR of @mr's index and key over the translation of @mem (@mr itself, or
 * the pages a re-registration pinned), with @pdn and @access.
 */
int rnic_mr_cmd_reg(struct rnic_nic *nic, const struct rnic_mr *mr, const struct rnic_mr *mem,
		    u32 pdn, u32 access)
{
	struct rnic_mr_ctx *ctx;
	int ret;

	mutex_lock(&nic->cmd_lock);
	ctx = &nic->mr_ctx[mr->index];
	memset(ctx, 0, sizeof(*ctx));
	ctx->iova = mem->iova;
	ctx->length = mem->length;
	ctx->pd = pdn;
	ctx->mtt_offset = mem->mtt_offset;
	ctx->npages = mem->npages;
	ctx->access = access;
	ctx->key = mr->key & 0xff;
	ctx->page_shift = RNIC_MR_PAGE_SHIFT;
	ret = rnic_cmd(nic, RNIC_CMD_REG_MR, mr->index);
	mutex_unlock(&nic->cmd_lock);
	return ret;
}

/*
 * What REG_MR of user memory and of a dma-buf share, under uc->lock once the memory is
 * pinned or imported: the PD, the GPU's liveness, the DMA mapping of pinned pages (a
 * dma-buf comes mapped; @strict as in rnic_mr_map()), MTT space and entries, the MR index
 * and the device's REG_MR command. On failure it undoes only its own steps.
 */
int rnic_mr_add(struct rnic_ucontext *uc, struct rnic_mr *mr, u32 pdn, bool strict,
		const char **why)
{
	struct rnic_nic *nic = uc->nic;
	struct rnic_pd *pd;
	int id, ret;

	*why = "the device went away";
	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;

	*why = "the protection domain";
	ret = -ENOENT;
	pd = xa_load(&uc->pds, pdn);
	if (!pd)
		goto err_unlock;
	mr->pd = pd;

	/* A GPU whose removal started no longer counts (its MRs are being revoked). */
	*why = "the GPU that provides the memory is going away";
	ret = -ENODEV;
	if (mr->provider && !rnic_p2p_provider_live(mr->provider))
		goto err_unlock;

	ret = rnic_mr_translate(nic, mr, strict, why);
	if (ret)
		goto err_unlock;

	*why = "MR index";
	/* Index 0 is never used, so lkey/rkey 0 never names an MR. */
	id = ida_alloc_range(&nic->mr_ida, 1, nic->max_mr - 1, GFP_KERNEL);
	if (id < 0) {
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_untranslate;
	}
	mr->index = id;
	mr->key = mr->index << 8 | ++nic->mr_gen[mr->index];	/* the IDA makes it ours */

	*why = "object table";
	ret = xa_insert(&uc->mrs, mr->index, mr, GFP_KERNEL);
	if (ret)
		goto err_ida;

	*why = "the device's REG_MR command";
	ret = rnic_mr_cmd_reg(nic, mr, mr, pd->pdn, mr->access);
	if (ret)
		goto err_xa;

	pd->users++;
	atomic64_add(mr->npages, &nic->stats.mr_pinned_pages);
	rnic_uc_unlock(uc);
	return 0;

err_xa:
	xa_erase(&uc->mrs, mr->index);
err_ida:
	ida_free(&nic->mr_ida, mr->index);
err_untranslate:
	rnic_mr_untranslate(nic, mr);
err_unlock:
	rnic_uc_unlock(uc);
	return ret;
}

/* The request's access bits and flags, and the outputs of a registered MR. */
int rnic_mr_check_access(struct device *dev, const struct rnic_reg_mr *req)
{
	if (req->pad || req->flags & ~RNIC_MR_FLAG_STRICT_P2P ||
	    req->access & ~(RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE |
			    RNIC_ACCESS_REMOTE_READ | RNIC_ACCESS_REMOTE_ATOMIC |
			    RNIC_ACCESS_FLUSH_GLOBAL)) {
		dev_warn_ratelimited(dev, "REG_MR: access 0x%x or flags 0x%x have unknown bits, or padding is set\n",
				     req->access, req->flags);
		return -EINVAL;
	}
	return 0;
}

void rnic_mr_done(const struct rnic_mr *mr, struct rnic_reg_mr *req)
{
	req->lkey = mr->key;
	req->rkey = mr->key;
	req->index = mr->index;
	req->path = mr->path;
}

/*
 * A new MR over the user memory @req names (range and access; nothing of the device yet),
 * its pages accounted and pinned: ordinary memory long-term, or with @gpu a GPU's P2PDMA
 * memory. Called without uc->lock (a fault may take as long as user space wants).
 */
struct rnic_mr *rnic_mr_pin_user(struct rnic_nic *nic, const struct rnic_reg_mr *req, bool gpu,
				 const char **why)
{
	unsigned long start;
	struct rnic_mr *mr;
	u32 pinned = 0;
	u64 last;
	int ret;

	*why = "the range";
	if (req->length == 0 || req->length > RNIC_UAPI_MAX_MR_SIZE ||
	    check_add_overflow(req->addr, req->length - 1, &last) || last > TASK_SIZE_MAX) {
		dev_warn_ratelimited(nic_dev(nic), "REG_MR: range 0x%llx + %llu is empty, over %llu bytes, or outside user space\n",
				     req->addr, req->length, RNIC_UAPI_MAX_MR_SIZE);
		return ERR_PTR(-EINVAL);
	}

	*why = "the MR";
	mr = kzalloc(sizeof(*mr), GFP_KERNEL_ACCOUNT);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->access = req->access;
	mr->dir = rnic_mr_writable(mr->access) ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE;
	mr->iova = req->addr;
	mr->length = req->length;
	start = req->addr & PAGE_MASK;
	mr->npages = (PAGE_ALIGN(last + 1) - start) >> PAGE_SHIFT;

	*why = "pinned-memory limit (RLIMIT_MEMLOCK)";
	ret = rnic_mr_account(mr);
	if (ret)
		goto err_free;

	*why = "page array";
	ret = -ENOMEM;
	mr->pages = kvmalloc_array(mr->npages, sizeof(*mr->pages), GFP_KERNEL_ACCOUNT);
	if (!mr->pages)
		goto err_unaccount;

	*why = "pinning the user pages";
	ret = rnic_mr_pin(mr, start, &pinned, false);
	if (ret && gpu) {
		/* Maybe GPU memory, which gup refuses without FOLL_PCI_P2PDMA. */
		unpin_user_pages(mr->pages, pinned);
		pinned = 0;
		ret = rnic_mr_pin_p2p(nic, mr, start, &pinned, ret, why);
	}
	if (ret)
		goto err_unpin;
	return mr;

err_unpin:
	unpin_user_pages(mr->pages, pinned);
	kvfree(mr->pages);
err_unaccount:
	rnic_mr_unaccount(mr);
err_free:
	kfree(mr);
	return ERR_PTR(ret);
}

/* Undoes rnic_mr_pin_user() for an MR that never reached the device. */
void rnic_mr_free_user(struct rnic_mr *mr)
{
	unpin_user_pages(mr->pages, mr->npages);
	pci_dev_put(mr->provider);
	kvfree(mr->pages);
	rnic_mr_unaccount(mr);
	kfree(mr);
}

/*
 * REG_MR, called without uc->lock: the user pages are pinned first (a fault there may
 * take as long as user space wants), then the mutex is taken for everything the device
 * and the file's objects see.
 */
int rnic_reg_mr(struct rnic_ucontext *uc, struct rnic_reg_mr *req)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	struct rnic_mr *mr;
	const char *why;
	int ret;

	ret = rnic_mr_check_access(dev, req);
	if (ret)
		return ret;
	mr = rnic_mr_pin_user(nic, req, true, &why);
	if (IS_ERR(mr)) {
		ret = PTR_ERR(mr);
		goto err;
	}
	ret = rnic_mr_add(uc, mr, req->pd, req->flags & RNIC_MR_FLAG_STRICT_P2P, &why);
	if (ret) {
		rnic_mr_free_user(mr);
		goto err;
	}
	rnic_mr_done(mr, req);
	return 0;

err:
	atomic64_inc(&nic->stats.mr_reg_failures);
	dev_warn_ratelimited(dev, "REG_MR 0x%llx + %llu (access 0x%x) failed at %s: %d\n",
			     req->addr, req->length, req->access, why, ret);
	return ret;
}

/* Unmaps, unpins and unaccounts an MR's memory and frees its MTT range. */
void rnic_mr_release_mem(struct rnic_nic *nic, struct rnic_mr *mr)
{
	rnic_mr_untranslate(nic, mr);
	if (mr->attach) {
		rnic_mr_dmabuf_release(mr);
		pci_dev_put(mr->provider);
		mr->provider = NULL;
	} else {
		rnic_mr_unpin(mr);
		kvfree(mr->pages);
		mr->pages = NULL;
		rnic_mr_unaccount(mr);
	}
	atomic64_sub(mr->npages, &nic->stats.mr_pinned_pages);
}

/*
 * Deregisters at the device, then unmaps and unpins. The caller removed it from its file.
 * When the device refuses, its memory stays pinned and mapped (zombie) until remove().
 */
void rnic_mr_destroy(struct rnic_nic *nic, struct rnic_mr *mr)
{
	mr->pd->users--;
	if (mr->revoked) {
		/* The device refuses REG_MR at an index it still holds: never hand it out again. */
		if (!mr->index_held)
			ida_free(&nic->mr_ida, mr->index);
		kfree(mr);
		return;
	}
	if (!rnic_cmd_release(nic, RNIC_CMD_DEREG_MR, mr->index)) {
		atomic64_add((u64)mr->npages << PAGE_SHIFT, &nic->stats.zombie_bytes);
		dev_warn_ratelimited(nic_dev(nic), "the device refused to deregister MR %u: its %u pages stay pinned until the device is removed\n",
				     mr->index, mr->npages);
		mutex_lock(&nic->zombie_lock);
		list_add(&mr->zombie, &nic->zombie_mrs);
		mutex_unlock(&nic->zombie_lock);
		return;
	}
	ida_free(&nic->mr_ida, mr->index);
	rnic_mr_release_mem(nic, mr);
	kfree(mr);
}

int rnic_dereg_mr(struct rnic_ucontext *uc, u32 index)
{
	struct rnic_mr *mr = xa_load(&uc->mrs, index);

	if (!mr)
		return -ENOENT;
	xa_erase(&uc->mrs, index);
	rnic_mr_destroy(uc->nic, mr);
	return 0;
}

int rnic_mr_sync(struct rnic_ucontext *uc, const struct rnic_mr_sync *req)
{
	struct rnic_mr *mr = xa_load(&uc->mrs, req->index);
	u64 end;

	if (!mr)
		return -ENOENT;
	if ((req->direction != RNIC_MR_SYNC_TO_BOUNCE &&
	     req->direction != RNIC_MR_SYNC_FROM_BOUNCE) ||
	    check_add_overflow(req->offset, req->length, &end) || end > mr->length) {
		dev_warn_ratelimited(nic_dev(uc->nic), "MR_SYNC MR %u: direction %u, range %llu + %llu outside the MR (%llu bytes)\n",
				     mr->index, req->direction, req->offset, req->length, mr->length);
		return -EINVAL;
	}
	if (mr->revoked)
		return -ENODEV;
	if (req->direction == RNIC_MR_SYNC_FROM_BOUNCE && !rnic_mr_writable(mr->access)) {
		dev_warn_ratelimited(nic_dev(uc->nic), "MR_SYNC MR %u: FROM_BOUNCE would write an MR registered read-only\n",
				     mr->index);
		return -EPERM;
	}
	if (mr->path != RNIC_MR_PATH_BOUNCE || !req->length)
		return 0;
	rnic_mr_bounce_sync(uc->nic, mr, req->offset, req->length,
			    req->direction == RNIC_MR_SYNC_TO_BOUNCE);
	return 0;
}
