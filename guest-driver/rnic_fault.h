/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: how the RNIC driver reacts to device faults (docs/faults.md).
 * rnic_fault.c; the hooks below are called from the verbs core (rnic_cmd.c,
 * rnic_verbs.c, rnic_poll.c) and the module entry points (rnic_main.c).
 */
#ifndef _RNIC_FAULT_H
#define _RNIC_FAULT_H

#include <linux/types.h>

struct rnic_nic;

/* How long a command may stay CMD_BUSY before the driver gives up and resets. */
#define RNIC_CMD_TIMEOUT_MS	2000

int rnic_fault_init(void);
void rnic_fault_exit(void);

/*
 * Vector 0 read @err from RNIC_REG_LAST_ERROR (hard-irq context). True when the code is
 * one this file handles (fatal, FLR required, AER, injected): it is logged and acted on.
 */
bool rnic_fault_async(struct rnic_nic *nic, u32 err);

/*
 * rnic_cmd() read @status: waits out CMD_BUSY (cmd_lock held, may sleep) and starts a
 * recovery on a command that never completes or on CMD_ERR_FATAL. Returns the final
 * status, or RNIC_CMD_BUSY when the command timed out (the caller returns -ETIMEDOUT).
 */
u32 rnic_fault_cmd_status(struct rnic_nic *nic, u32 op, u32 index, u32 status);

/*
 * The periodic liveness check (POLL_CQ, at most every RNIC_ALIVE_CHECK_MS) found the RNIC
 * answering: starts a recovery if RNIC_REG_STATUS says FATAL (its async interrupt lost).
 */
void rnic_fault_check_status(struct rnic_nic *nic);

/* rnic_nic_alive() just marked the RNIC gone: watch for the link to come back. */
void rnic_fault_gone(struct rnic_nic *nic);

/* POLL_CQ found completions on @cqn after sleeping a whole slice without the interrupt. */
void rnic_fault_missed_irq(struct rnic_nic *nic, u32 cqn);

extern const struct attribute_group *rnic_fault_driver_groups[];

#endif /* _RNIC_FAULT_H */
