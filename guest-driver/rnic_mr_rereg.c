// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: re-registration of an MR over user memory in place
 * (ibv_rereg_mr through ib_core's rereg_user_mr; docs/ibverbs.md "MR re-registration").
 *
 * The MR keeps its index and its keys, so a peer that holds its rkey goes on using it: the
 * device's MR is deregistered and registered again at the same index and key with the new
 * PD, access or translation. A new translation (or an access change between read-only and
 * writable, which the pin and the DMA direction follow) is pinned, mapped and written to
 * a new MTT range before the device lets go of the old one, and the old pages are released
 * only once the new registration stands. A message in flight on the MR is stopped as at
 * any DEREG_MR (R-MR-4) and requests that reach it between the two commands fail as for an
 * unknown key: IBA leaves a region that is being re-registered undefined for its users.
 *
 * A failure before DEREG_MR changes nothing. If REG_MR with the new attributes is refused,
 * the old ones are registered again; if the device refuses that too (a device that is
 * going away), the MR is left off the device with its memory released, as a revoked MR:
 * every use fails and dereg frees it. GPU memory and dma-buf MRs are not re-registered
 * (-EOPNOTSUPP): their revocation follows the GPU, which a swap of pages would race.
 */
#include <linux/err.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/xarray.h>

#include "rnic_mr.h"
#include "rnic_verbs.h"

/* Moves @nm's translation into @mr (whose own the caller released). */
static void rnic_mr_take_mem(struct rnic_mr *mr, struct rnic_mr *nm)
{
	mr->iova = nm->iova;
	mr->length = nm->length;
	mr->npages = nm->npages;
	mr->mtt_offset = nm->mtt_offset;
	mr->pages = nm->pages;
	mr->sgt = nm->sgt;
	mr->mm = nm->mm;
	mr->path = nm->path;
	mr->dir = nm->dir;
	kfree(nm);
}

/* The MR at @index if this file has it and it can be re-registered, else an error. */
static struct rnic_mr *rnic_mr_rereg_target(struct rnic_ucontext *uc, u32 index)
{
	struct rnic_mr *mr = xa_load(&uc->mrs, index);

	if (!mr)
		return ERR_PTR(-ENOENT);
	if (mr->revoked)
		return ERR_PTR(-ENODEV);
	if (mr->attach || mr->provider)
		return ERR_PTR(-EOPNOTSUPP);
	return mr;
}

int rnic_mr_rereg(struct rnic_ucontext *uc, u32 index, u32 what, struct rnic_reg_mr *req)
{
	struct rnic_nic *nic = uc->nic;
	struct device *dev = nic_dev(nic);
	struct rnic_mr *mr, *nm = NULL;
	const char *why = "the MR";
	struct rnic_pd *pd;
	bool repin;
	int ret;

	if (!what || what & ~(RNIC_REREG_TRANS | RNIC_REREG_PD | RNIC_REREG_ACCESS))
		return -EOPNOTSUPP;
	if (what & RNIC_REREG_ACCESS) {
		ret = rnic_mr_check_access(dev, req);
		if (ret)
			return ret;
	}

	/* What stays as it was, read under the lock; pinning happens outside it. */
	ret = rnic_uc_lock(uc);
	if (ret)
		return ret;
	mr = rnic_mr_rereg_target(uc, index);
	if (IS_ERR(mr)) {
		rnic_uc_unlock(uc);
		ret = PTR_ERR(mr);
		goto err_log;
	}
	if (!(what & RNIC_REREG_TRANS)) {
		req->addr = mr->iova;
		req->length = mr->length;
	}
	if (!(what & RNIC_REREG_ACCESS))
		req->access = mr->access;
	if (!(what & RNIC_REREG_PD))
		req->pd = mr->pd->pdn;
	repin = what & RNIC_REREG_TRANS ||
		rnic_mr_writable(req->access) != rnic_mr_writable(mr->access);
	rnic_uc_unlock(uc);

	if (repin) {
		nm = rnic_mr_pin_user(nic, req, false, &why);
		if (IS_ERR(nm)) {
			ret = PTR_ERR(nm);
			nm = NULL;
			goto err_log;
		}
	}

	ret = rnic_uc_lock(uc);
	if (ret)
		goto err_free;
	why = "the MR (gone or revoked meanwhile)";
	if (rnic_mr_rereg_target(uc, index) != mr) {
		ret = -ENODEV;
		goto err_unlock;
	}
	why = "the protection domain";
	pd = xa_load(&uc->pds, req->pd);
	if (!pd) {
		ret = -ENOENT;
		goto err_unlock;
	}
	if (nm) {
		ret = rnic_mr_translate(nic, nm, true, &why);
		if (ret)
			goto err_unlock;
	}

	why = "the device's DEREG_MR command";
	if (!rnic_cmd_release(nic, RNIC_CMD_DEREG_MR, mr->index)) {
		ret = -EIO;
		goto err_untranslate;
	}
	why = "the device's REG_MR command";
	ret = rnic_mr_cmd_reg(nic, mr, nm ? nm : mr, pd->pdn, req->access);
	if (ret) {
		if (rnic_mr_cmd_reg(nic, mr, mr, mr->pd->pdn, mr->access)) {
			dev_warn_ratelimited(dev, "MR %u: the device refused its old registration back: left off the device\n",
					     mr->index);
			rnic_mr_release_mem(nic, mr);
			mr->revoked = true;
		}
		goto err_untranslate;
	}

	mr->pd->users--;
	pd->users++;
	mr->pd = pd;
	if (nm) {
		struct rnic_mr old = *mr;

		rnic_mr_release_mem(nic, &old);
		atomic64_add(nm->npages, &nic->stats.mr_pinned_pages);
		rnic_mr_take_mem(mr, nm);
	}
	mr->access = req->access;
	rnic_uc_unlock(uc);
	return 0;

err_untranslate:
	if (nm)
		rnic_mr_untranslate(nic, nm);
err_unlock:
	rnic_uc_unlock(uc);
err_free:
	if (nm)
		rnic_mr_free_user(nm);
err_log:
	atomic64_inc(&nic->stats.mr_reg_failures);
	dev_warn_ratelimited(dev, "REREG_MR %u (0x%x) failed at %s: %d\n", index, what, why, ret);
	return ret;
}
