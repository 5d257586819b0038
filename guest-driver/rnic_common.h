/* SPDX-License-Identifier: GPL-2.0 */
/*
 * rnic-emu guest driver: state and helpers shared by the RNIC and GPU functions.
 *
 * Both functions of the emulated device pair expose the same probe-time contract in BAR0
 * (an ID magic, a major.minor contract version, a scratch register, and an interrupt
 * self-test register that raises a chosen MSI-X vector; see include/uapi/rnic_emu_regs.h).
 * What follows from that contract lives here once: BAR0 bring-up and checks, MSI-X vector
 * setup with per-vector counters, and the sysfs attributes both functions carry.
 */
#ifndef _RNIC_COMMON_H
#define _RNIC_COMMON_H

#include <linux/atomic.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/sysfs.h>
#include <linux/types.h>
#include <linux/wait.h>

#include "uapi/rnic_emu_regs.h"

#define RNIC_EMU_NIC_DRV_NAME	"rnic_emu"
#define RNIC_EMU_GPU_DRV_NAME	"rnic_emu_gpu"

/* How long the irq_test attribute waits for the interrupt it asked for. */
#define RNIC_IRQ_TEST_TIMEOUT_MS	2000

/* What differs between the two functions' BAR0 probe contracts. */
struct rnic_hw_desc {
	const char *label;		/* "RNIC" or "GPU", for log messages */
	u32 id_magic;			/* expected value of the ID register */
	resource_size_t bar0_size;	/* BAR0 size the contract promises */
	unsigned int reg_id;
	unsigned int reg_version;
	unsigned int reg_scratch;
	unsigned int reg_int_trigger;
};

struct rnic_dev;

/* One MSI-X vector: its Linux irq and how often it fired. */
struct rnic_vec {
	struct rnic_dev *rd;
	unsigned int index;
	int irq;
	atomic64_t count;
	char name[48];
};

/* Per-function state common to both drivers; embedded in each driver's own struct. */
struct rnic_dev {
	struct pci_dev *pdev;
	const struct rnic_hw_desc *hw;
	void __iomem *bar0;
	u32 id;
	u32 version;

	unsigned int nvec;		/* MSI-X vectors allocated and requested */
	struct rnic_vec *vecs;		/* nvec entries */
	wait_queue_head_t irq_wq;	/* woken by every interrupt */
	/*
	 * Optional, set before rnic_irq_setup(): runs in hard-irq context for each vector and
	 * says whether anything was waiting for that interrupt. Interrupts nobody waited for
	 * are answered IRQ_NONE, so the kernel's spurious-interrupt detection notices a
	 * device that storms (and disables the line) instead of the CPU spinning forever.
	 */
	bool (*vec_event)(struct rnic_dev *rd, unsigned int vec);
	atomic64_t spurious_irqs;
	struct mutex irq_test_lock;	/* one interrupt self-test at a time */
	atomic_t irq_test_vec;		/* the vector the self-test waits for, or -1 */
};

static inline unsigned int rnic_version_major(u32 version)
{
	return version >> 16;
}

static inline unsigned int rnic_version_minor(u32 version)
{
	return version & 0xffff;
}

/* True when @rd's @reg reads all-ones: the function went away (surprise removal). */
bool rnic_dev_reads_ones(struct rnic_dev *rd, unsigned int reg);

int rnic_dev_setup(struct rnic_dev *rd, struct pci_dev *pdev,
		   const struct rnic_hw_desc *hw, const char *res_name);
void rnic_dev_teardown(struct rnic_dev *rd);

int rnic_irq_setup(struct rnic_dev *rd, unsigned int max_vecs, const char *drv_name);
void rnic_irq_teardown(struct rnic_dev *rd);

/* hw_id, hw_version, irq_counts, irq_test: drvdata must point at the struct rnic_dev. */
extern const struct attribute_group rnic_common_attr_group;

extern struct pci_driver rnic_nic_driver;
extern struct pci_driver rnic_gpu_driver;

#endif /* _RNIC_COMMON_H */
