// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: protection domains (docs/verbs.md §4). A PD is only a number
 * (1..65535) the device compares between QPs and MRs; the driver counts its users so that
 * a PD in use cannot be freed. Nothing of it lives in the device.
 */
#include <linux/slab.h>

#include "rnic_verbs.h"

int rnic_alloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req)
{
	struct rnic_nic *nic = uc->nic;
	struct rnic_pd *pd;
	int id, ret;

	if (req->pad) {
		dev_warn_ratelimited(nic_dev(nic), "ALLOC_PD: non-zero padding\n");
		return -EINVAL;
	}
	pd = kzalloc(sizeof(*pd), GFP_KERNEL);
	if (!pd)
		return -ENOMEM;
	/* PD 0 is never handed out, so a zeroed context cannot match a real PD. */
	id = ida_alloc_range(&nic->pd_ida, 1, RNIC_MAX_PD - 1, GFP_KERNEL);
	if (id < 0) {
		dev_warn_ratelimited(nic_dev(nic), "ALLOC_PD: no free protection domain\n");
		ret = id == -ENOSPC ? -ENOMEM : id;
		goto err_free;
	}
	pd->pdn = id;
	ret = xa_insert(&uc->pds, pd->pdn, pd, GFP_KERNEL);
	if (ret)
		goto err_ida;
	req->pd = pd->pdn;
	return 0;

err_ida:
	ida_free(&nic->pd_ida, id);
err_free:
	kfree(pd);
	return ret;
}

void rnic_pd_free(struct rnic_ucontext *uc, struct rnic_pd *pd)
{
	xa_erase(&uc->pds, pd->pdn);
	ida_free(&uc->nic->pd_ida, pd->pdn);
	kfree(pd);
}

int rnic_dealloc_pd(struct rnic_ucontext *uc, struct rnic_alloc_pd *req)
{
	struct rnic_pd *pd = xa_load(&uc->pds, req->pd);

	if (req->pad)
		return -EINVAL;
	if (!pd)
		return -ENOENT;
	if (pd->users) {
		dev_warn_ratelimited(nic_dev(uc->nic), "DEALLOC_PD %u: still used by %u QPs/MRs\n",
				     pd->pdn, pd->users);
		return -EBUSY;
	}
	rnic_pd_free(uc, pd);
	return 0;
}
