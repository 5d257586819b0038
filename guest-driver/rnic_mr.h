/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: what rnic_mr.c offers rnic_mr_dmabuf.c: the registration both
 * kinds of MR go through (rnic_mr_add()), the checks and outputs of REG_MR around it, and
 * the teardown of a dma-buf import (rnic_mr_release_mem() undoes both kinds); and to
 * rnic_mr_rereg.c the pinning, translation and REG_MR command a re-registration repeats.
 * The rest of the driver sees MRs through rnic_verbs.h only.
 */
#ifndef _RNIC_MR_H
#define _RNIC_MR_H

#include <linux/types.h>

#include "uapi/rnic_emu_regs.h"

struct device;
struct rnic_mr;
struct rnic_reg_mr;
struct rnic_ucontext;

/* Whether the device may write the pages. */
static inline bool rnic_mr_writable(u32 access)
{
	return access & (RNIC_ACCESS_LOCAL_WRITE | RNIC_ACCESS_REMOTE_WRITE);
}

int rnic_mr_check_access(struct device *dev, const struct rnic_reg_mr *req);
int rnic_mr_add(struct rnic_ucontext *uc, struct rnic_mr *mr, u32 pdn, bool strict,
		const char **why);
void rnic_mr_done(const struct rnic_mr *mr, struct rnic_reg_mr *req);
void rnic_mr_dmabuf_release(struct rnic_mr *mr);

/* rnic_mr.c, for the re-registration in rnic_mr_rereg.c */
struct rnic_nic;
struct rnic_mr *rnic_mr_pin_user(struct rnic_nic *nic, const struct rnic_reg_mr *req, bool gpu,
				 const char **why);
void rnic_mr_free_user(struct rnic_mr *mr);
int rnic_mr_translate(struct rnic_nic *nic, struct rnic_mr *mr, bool strict, const char **why);
void rnic_mr_untranslate(struct rnic_nic *nic, struct rnic_mr *mr);
int rnic_mr_cmd_reg(struct rnic_nic *nic, const struct rnic_mr *mr, const struct rnic_mr *mem,
		    u32 pdn, u32 access);

#endif /* _RNIC_MR_H */
