// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the doorbell page (docs/verbs.md §3.1, rnic_dbpage.h).
 *
 * Posting: the WQEs are written (coherent DMA memory), then the new producer index is
 * stored into the QP's page; a full barrier orders that store before the load of the
 * device's event index (the store-buffering pattern of docs/verbs.md §3.1: without mb()
 * a doorbell can be lost), and the MMIO doorbell is rung only when the event index lies
 * in [old, new). Callers serialize posts to one queue (the file's mutex).
 */
#include <linux/io.h>
#include <linux/module.h>
#include <linux/pci.h>

#include "rnic_dbpage.h"
#include "rnic_verbs.h"

static bool db_page = true;
module_param(db_page, bool, 0444);
MODULE_PARM_DESC(db_page, "use the RNIC's doorbell page when it offers one (default: yes)");

static void __iomem *rnic_qp_page(struct rnic_nic *nic, u32 qpn)
{
	return nic->dbp + rnic_dbp_qp(qpn);
}

/**
 * rnic_dbpage_init() - map the doorbell page if the device offers it
 * @nic: the RNIC, BAR0 mapped and limits read
 *
 * Return: the DMA_CTRL bits to add (RNIC_DMA_CTRL_DB_PAGE or 0). A missing or short BAR2
 * is not an error: the driver then uses the MMIO doorbells only.
 */
u32 rnic_dbpage_init(struct rnic_nic *nic)
{
	struct pci_dev *pdev = nic->rd.pdev;
	u32 caps = ioread32(nic->rd.bar0 + RNIC_REG_CAPS);

	nic->dbp = NULL;
	if (!db_page || !(caps & RNIC_CAP_DB_PAGE))
		return 0;
	if (nic->max_qp > RNIC_DBP_CQ_PAGES / RNIC_DBP_PAGE ||
	    pci_resource_len(pdev, RNIC_EMU_RNIC_DB_BAR) < RNIC_EMU_RNIC_DB_BAR_SIZE) {
		dev_warn(&pdev->dev, "doorbell page: BAR%d is %llu bytes (need %#x); using MMIO doorbells\n",
			 RNIC_EMU_RNIC_DB_BAR,
			 (unsigned long long)pci_resource_len(pdev, RNIC_EMU_RNIC_DB_BAR),
			 RNIC_EMU_RNIC_DB_BAR_SIZE);
		return 0;
	}
	nic->dbp = pci_iomap(pdev, RNIC_EMU_RNIC_DB_BAR, RNIC_EMU_RNIC_DB_BAR_SIZE);
	if (!nic->dbp) {
		dev_warn(&pdev->dev, "doorbell page: mapping BAR%d failed; using MMIO doorbells\n",
			 RNIC_EMU_RNIC_DB_BAR);
		return 0;
	}
	dev_info(&pdev->dev, "doorbell page in BAR%d: MMIO doorbells only when the device sleeps\n",
		 RNIC_EMU_RNIC_DB_BAR);
	return RNIC_DMA_CTRL_DB_PAGE;
}

/* After DMA_CTRL no longer has RNIC_DMA_CTRL_DB_PAGE. */
void rnic_dbpage_fini(struct rnic_nic *nic)
{
	if (nic->dbp)
		pci_iounmap(nic->rd.pdev, nic->dbp);
	nic->dbp = NULL;
}

/**
 * rnic_ring_wq() - tell the device that a work queue's producer moved @old -> @new
 * @nic: the RNIC
 * @qpn: the QP
 * @recv: the receive queue (else the send queue)
 * @old: the producer index before this post
 * @new: the producer index after it; the WQEs up to it are written
 */
void rnic_ring_wq(struct rnic_nic *nic, u32 qpn, bool recv, u16 old, u16 new)
{
	void __iomem *page;
	u16 event;

	if (nic->dbp) {
		page = rnic_qp_page(nic, qpn);
		/* writel() orders the WQE stores before the index store. */
		writel(new, page + rnic_dbp_pi(recv));
		mb();	/* the index store before the event-index load (docs/verbs.md §3.1) */
		event = readl(page + rnic_dbp_event(recv));
		if (!rnic_need_kick(event, new, old))
			return;
	}
	writel(rnic_db_value(qpn, new), nic->rd.bar0 + (recv ? RQ_DB_IDX : WQE_DB_IDX));
}

/* The driver consumed CQ @cqn's entries up to @ci (the device needs it to see room). */
void rnic_cq_set_ci(struct rnic_nic *nic, u32 cqn, u16 ci)
{
	if (nic->dbp)
		writel(ci, nic->dbp + rnic_dbp_cq(cqn) + RNIC_DBP_CQ_CI);
	else
		writel(rnic_db_value(cqn, ci), nic->rd.bar0 + CQE_CONS_IDX);
}
