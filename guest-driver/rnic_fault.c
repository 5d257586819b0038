// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: what the RNIC driver does when the device misbehaves
 * (docs/faults.md has the same list as a checklist for other drivers).
 *
 * - STATUS_FATAL, ASYNC_ERR_FATAL or CMD_ERR_FATAL: the engine failed. The device already
 *   completed the queued work in error (WC_FATAL_ERR, then flushes); the driver logs once,
 *   fails the command that saw it with -EIO, and reloads itself: remove() (open files die,
 *   every later call on them gets -ENODEV, sleeping pollers wake) then probe() (device
 *   reset, tables set up again). User space opens the device again.
 * - STATUS_FLR_REQUIRED, ASYNC_ERR_FLR_REQUIRED: the same, with a Function Level Reset
 *   between remove and probe (a register reset no longer recovers the function).
 * - A command whose CMD_STATUS stays CMD_BUSY for RNIC_CMD_TIMEOUT_MS: -ETIMEDOUT to the
 *   caller, one log line, reload (the reset inside probe ends the hung command).
 * - ASYNC_ERR_AER: the AER capability's status registers are read, logged and cleared; an
 *   uncorrectable fatal error gets an FLR and a reload, the others are counted only
 *   (their effects, such as an error completion for poisoned data, reach the QP itself).
 * - ASYNC_ERR_INJECTED: logged and counted.
 * - STATUS_FATAL whose interrupt was lost (or has not been handled yet): the liveness
 *   check of a sleeping POLL_CQ (every RNIC_ALIVE_CHECK_MS at most) reads RNIC_REG_STATUS
 *   too and starts the same recovery; whichever path comes first logs and counts it.
 * - The device reads all-ones (link down, surprise removal): rnic_nic_alive() marks it
 *   gone and every call fails with -ENODEV; a watch reads the vendor ID from
 *   configuration space every RNIC_LINK_WATCH_MS and reloads the driver once the
 *   function answers again.
 * - A completion found after a whole poll slice without its interrupt (a lost MSI-X
 *   message): counted and logged; the slice (a second) bounds the delay. Spurious
 *   interrupts are answered IRQ_NONE and counted in rnic_common.c.
 *
 * Recoveries run on this module's workqueue, never inside the remove path they trigger,
 * each with a reference on the pci_dev; one at a time per device, at most
 * RNIC_MAX_RECOVERIES per module load (a device that keeps failing stays unbound).
 * Counters survive reloads: /sys/bus/pci/drivers/rnic_emu/fault_stats.
 */
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/workqueue.h>

#include "rnic_fault.h"
#include "rnic_verbs.h"

#define RNIC_MAX_RECOVERIES	64
#define RNIC_LINK_WATCH_MS	200
#define RNIC_LINK_WATCH_TRIES	1500		/* five minutes */

enum rnic_fault_action {
	RNIC_FA_RELOAD,		/* remove + probe */
	RNIC_FA_FLR,		/* remove + FLR + probe */
	RNIC_FA_AER,		/* read, log and clear the AER status */
	RNIC_FA_LINK_WATCH,	/* wait for the function to answer, then reload */
};

static const char *const rnic_fa_names[] = {
	[RNIC_FA_RELOAD]	= "reload",
	[RNIC_FA_FLR]		= "FLR and reload",
	[RNIC_FA_AER]		= "AER status",
	[RNIC_FA_LINK_WATCH]	= "link watch",
};

/* One scheduled action; freed only at module exit (bounded by RNIC_MAX_RECOVERIES). */
struct rnic_fault_item {
	struct delayed_work dw;
	struct list_head node;
	struct pci_dev *pdev;		/* a reference, dropped when done */
	enum rnic_fault_action action;
	unsigned int tries;
	bool done;
};

/* Driver-wide counters (they outlive every bound device, which the reloads replace). */
static struct {
	atomic64_t fatal, flr_required, cmd_timeouts, aer_correctable, aer_nonfatal, aer_fatal;
	atomic64_t injected, link_down, link_up, missed_irqs, recoveries, recovery_failures;
} rnic_fs;

static struct workqueue_struct *rnic_fault_wq;
static DEFINE_SPINLOCK(rnic_fault_lock);	/* guards the list, the count and exiting */
static LIST_HEAD(rnic_fault_items);
static unsigned int rnic_fault_count;
static bool rnic_fault_exiting;

static void rnic_fault_work(struct work_struct *w);

/* Whether a recovery of @pdev is scheduled and not done yet. */
static bool rnic_fault_pending(struct pci_dev *pdev)
{
	struct rnic_fault_item *it;
	unsigned long flags;
	bool pending = false;

	spin_lock_irqsave(&rnic_fault_lock, flags);
	list_for_each_entry(it, &rnic_fault_items, node)
		pending |= it->pdev == pdev && !READ_ONCE(it->done) && it->action != RNIC_FA_AER;
	spin_unlock_irqrestore(&rnic_fault_lock, flags);
	return pending;
}

/*
 * Schedules @action for @pdev unless one is pending for it already (any context). True
 * when this call scheduled it.
 */
static bool rnic_fault_schedule(struct pci_dev *pdev, enum rnic_fault_action action,
				unsigned long delay)
{
	struct rnic_fault_item *it;
	unsigned long flags;

	spin_lock_irqsave(&rnic_fault_lock, flags);
	list_for_each_entry(it, &rnic_fault_items, node) {
		if (it->pdev == pdev && !READ_ONCE(it->done) && it->action != RNIC_FA_AER) {
			spin_unlock_irqrestore(&rnic_fault_lock, flags);
			return false;	/* a recovery is on its way */
		}
	}
	if (rnic_fault_exiting || rnic_fault_count >= RNIC_MAX_RECOVERIES) {
		spin_unlock_irqrestore(&rnic_fault_lock, flags);
		dev_err_ratelimited(&pdev->dev, "no %s: %u recoveries already (limit %u)\n",
				    rnic_fa_names[action], rnic_fault_count, RNIC_MAX_RECOVERIES);
		atomic64_inc(&rnic_fs.recovery_failures);
		return false;
	}
	it = kzalloc(sizeof(*it), GFP_ATOMIC);
	if (!it) {
		spin_unlock_irqrestore(&rnic_fault_lock, flags);
		atomic64_inc(&rnic_fs.recovery_failures);
		return false;
	}
	INIT_DELAYED_WORK(&it->dw, rnic_fault_work);
	it->pdev = pci_dev_get(pdev);
	it->action = action;
	list_add_tail(&it->node, &rnic_fault_items);
	rnic_fault_count++;
	queue_delayed_work(rnic_fault_wq, &it->dw, delay);
	spin_unlock_irqrestore(&rnic_fault_lock, flags);
	return true;
}

/* Reads, logs and clears the AER status; true when an uncorrectable error is fatal. */
static bool rnic_fault_aer(struct pci_dev *pdev)
{
	u32 cor = 0, uncor = 0, sev = 0, fep = 0;
	int aer = pci_find_ext_capability(pdev, PCI_EXT_CAP_ID_ERR);

	if (!aer) {
		dev_err_ratelimited(&pdev->dev, "AER error reported, but the function has no AER capability\n");
		return false;
	}
	pci_read_config_dword(pdev, aer + PCI_ERR_COR_STATUS, &cor);
	pci_read_config_dword(pdev, aer + PCI_ERR_UNCOR_STATUS, &uncor);
	pci_read_config_dword(pdev, aer + PCI_ERR_UNCOR_SEVER, &sev);
	pci_read_config_dword(pdev, aer + PCI_ERR_CAP, &fep);
	if (cor == 0xffffffff || uncor == 0xffffffff)
		return false;	/* the link went away meanwhile: the liveness check handles it */
	if (cor) {
		atomic64_inc(&rnic_fs.aer_correctable);
		dev_warn_ratelimited(&pdev->dev, "AER: correctable error, status 0x%08x: counted, no action\n", cor);
		pci_write_config_dword(pdev, aer + PCI_ERR_COR_STATUS, cor);
	}
	if (uncor) {
		bool fatal = uncor & sev;

		atomic64_inc(fatal ? &rnic_fs.aer_fatal : &rnic_fs.aer_nonfatal);
		dev_err_ratelimited(&pdev->dev, "AER: uncorrectable %s error, status 0x%08x (first error bit %u)%s\n",
				    fatal ? "fatal" : "non-fatal", uncor, fep & PCI_ERR_CAP_FEP(0x1f),
				    fatal ? ": resetting the function" : "");
		pci_write_config_dword(pdev, aer + PCI_ERR_UNCOR_STATUS, uncor);
		return fatal;
	}
	return false;
}

/* Unbinds the driver, optionally resets the function, binds it again. */
static void rnic_fault_reload(struct pci_dev *pdev, bool flr)
{
	struct device *dev = &pdev->dev;
	int ret;

	device_release_driver(dev);
	if (flr) {
		ret = pci_reset_function(pdev);
		dev_info(dev, "function level reset: %s (%d)\n", ret ? "failed" : "done", ret);
	}
	ret = device_attach(dev);
	if (ret == 1 && dev->driver) {
		atomic64_inc(&rnic_fs.recoveries);
		dev_info(dev, "recovered: driver reloaded%s\n", flr ? " after an FLR" : "");
	} else {
		atomic64_inc(&rnic_fs.recovery_failures);
		dev_err(dev, "recovery failed: the driver did not bind again (%d)\n", ret);
	}
}

static void rnic_fault_work(struct work_struct *w)
{
	struct rnic_fault_item *it = container_of(to_delayed_work(w), struct rnic_fault_item, dw);
	struct pci_dev *pdev = it->pdev;
	u32 vendor = 0xffffffff;

	switch (it->action) {
	case RNIC_FA_AER:
		if (rnic_fault_aer(pdev))
			rnic_fault_reload(pdev, true);
		break;
	case RNIC_FA_LINK_WATCH:
		pci_read_config_dword(pdev, PCI_VENDOR_ID, &vendor);
		if (vendor == 0xffffffff) {
			if (++it->tries < RNIC_LINK_WATCH_TRIES && !READ_ONCE(rnic_fault_exiting)) {
				queue_delayed_work(rnic_fault_wq, &it->dw, msecs_to_jiffies(RNIC_LINK_WATCH_MS));
				return;
			}
			dev_err(&pdev->dev, "the function did not come back: left unbound\n");
			atomic64_inc(&rnic_fs.recovery_failures);
			break;
		}
		atomic64_inc(&rnic_fs.link_up);
		dev_info(&pdev->dev, "the function answers again (vendor 0x%04x): reloading the driver\n",
			 vendor & 0xffff);
		rnic_fault_reload(pdev, false);
		break;
	case RNIC_FA_RELOAD:
	case RNIC_FA_FLR:
		rnic_fault_reload(pdev, it->action == RNIC_FA_FLR);
		break;
	}
	pci_dev_put(pdev);
	WRITE_ONCE(it->done, true);
}

bool rnic_fault_async(struct rnic_nic *nic, u32 err)
{
	struct pci_dev *pdev = nic->rd.pdev;
	u32 index = err & 0xffffff;

	switch (err >> 24) {
	case RNIC_ASYNC_ERR_FATAL:
		if (rnic_fault_schedule(pdev, RNIC_FA_RELOAD, 0)) {
			atomic64_inc(&rnic_fs.fatal);
			dev_err_ratelimited(&pdev->dev, "device fatal error (STATUS_FATAL): outstanding work failed by the device, reloading the driver\n");
		}
		return true;
	case RNIC_ASYNC_ERR_FLR_REQUIRED:
		if (rnic_fault_schedule(pdev, RNIC_FA_FLR, 0)) {
			atomic64_inc(&rnic_fs.flr_required);
			dev_err_ratelimited(&pdev->dev, "device requires a function level reset (STATUS_FLR_REQUIRED): FLR and reload\n");
		}
		return true;
	case RNIC_ASYNC_ERR_AER:
		rnic_fault_schedule(pdev, RNIC_FA_AER, 0);
		return true;
	case RNIC_ASYNC_ERR_INJECTED:
		atomic64_inc(&rnic_fs.injected);
		dev_warn_ratelimited(&pdev->dev, "asynchronous event with no device state behind it (code %u, object %u): counted\n",
				     RNIC_ASYNC_ERR_INJECTED, index);
		return true;
	default:
		return false;
	}
}

u32 rnic_fault_cmd_status(struct rnic_nic *nic, u32 op, u32 index, u32 status)
{
	void __iomem *bar0 = nic->rd.bar0;
	unsigned long deadline = jiffies + msecs_to_jiffies(RNIC_CMD_TIMEOUT_MS);

	/* Behind a hung command whose reset is on its way, the next ones fail at once. */
	if (status == RNIC_CMD_BUSY && rnic_fault_pending(nic->rd.pdev))
		return status;
	while (status == RNIC_CMD_BUSY && time_before(jiffies, deadline)) {
		usleep_range(1000, 2000);
		status = ioread32(bar0 + RNIC_REG_CMD_STATUS);
	}
	if (status == RNIC_CMD_BUSY) {
		atomic64_inc(&rnic_fs.cmd_timeouts);
		dev_err_ratelimited(nic_dev(nic), "command %u index %u did not complete in %u ms (CMD_STATUS BUSY): resetting the device\n",
				    op, index, RNIC_CMD_TIMEOUT_MS);
		rnic_fault_schedule(nic->rd.pdev, RNIC_FA_RELOAD, 0);
		/*
		 * The reload's remove() issues no command to the hung engine: it resets it
		 * first (rnic_verbs_quiesce), after which commands answer -ENODEV.
		 */
	} else if (status == RNIC_CMD_ERR_FATAL) {
		u32 st = ioread32(bar0 + RNIC_REG_STATUS);
		bool flr = st != 0xffffffff && (st & RNIC_STATUS_FLR_REQUIRED);

		if (rnic_fault_schedule(nic->rd.pdev, flr ? RNIC_FA_FLR : RNIC_FA_RELOAD, 0)) {
			atomic64_inc(flr ? &rnic_fs.flr_required : &rnic_fs.fatal);
			dev_err_ratelimited(nic_dev(nic), "device fatal error (STATUS 0x%x) found by command %u index %u (CMD_ERR_FATAL): %s\n",
					    st, op, index, flr ? "FLR and reload" : "reloading the driver");
		}
	}
	return status;
}

void rnic_fault_check_status(struct rnic_nic *nic)
{
	u32 st = ioread32(nic->rd.bar0 + RNIC_REG_STATUS);
	bool flr;

	if (st == 0xffffffff || !(st & RNIC_STATUS_FATAL))
		return;
	flr = st & RNIC_STATUS_FLR_REQUIRED;
	if (rnic_fault_schedule(nic->rd.pdev, flr ? RNIC_FA_FLR : RNIC_FA_RELOAD, 0)) {
		atomic64_inc(flr ? &rnic_fs.flr_required : &rnic_fs.fatal);
		dev_err_ratelimited(nic_dev(nic), "device fatal error (STATUS 0x%x) found by the liveness check: %s\n",
				    st, flr ? "FLR and reload" : "reloading the driver");
	}
}

void rnic_fault_gone(struct rnic_nic *nic)
{
	atomic64_inc(&rnic_fs.link_down);
	rnic_fault_schedule(nic->rd.pdev, RNIC_FA_LINK_WATCH, msecs_to_jiffies(RNIC_LINK_WATCH_MS));
}

void rnic_fault_missed_irq(struct rnic_nic *nic, u32 cqn)
{
	atomic64_inc(&rnic_fs.missed_irqs);
	dev_warn_ratelimited(nic_dev(nic), "CQ %u: completion found without its interrupt (lost MSI-X?)\n", cqn);
}

static ssize_t fault_stats_show(struct device_driver *drv, char *buf)
{
	return sysfs_emit(buf,
			  "fatal %lld\nflr_required %lld\ncmd_timeouts %lld\naer_correctable %lld\naer_nonfatal %lld\naer_fatal %lld\ninjected %lld\nlink_down %lld\nlink_up %lld\nmissed_irqs %lld\nrecoveries %lld\nrecovery_failures %lld\n",
			  (long long)atomic64_read(&rnic_fs.fatal),
			  (long long)atomic64_read(&rnic_fs.flr_required),
			  (long long)atomic64_read(&rnic_fs.cmd_timeouts),
			  (long long)atomic64_read(&rnic_fs.aer_correctable),
			  (long long)atomic64_read(&rnic_fs.aer_nonfatal),
			  (long long)atomic64_read(&rnic_fs.aer_fatal),
			  (long long)atomic64_read(&rnic_fs.injected),
			  (long long)atomic64_read(&rnic_fs.link_down),
			  (long long)atomic64_read(&rnic_fs.link_up),
			  (long long)atomic64_read(&rnic_fs.missed_irqs),
			  (long long)atomic64_read(&rnic_fs.recoveries),
			  (long long)atomic64_read(&rnic_fs.recovery_failures));
}
static DRIVER_ATTR_RO(fault_stats);

static struct attribute *rnic_fault_driver_attrs[] = {
	&driver_attr_fault_stats.attr,
	NULL
};

static const struct attribute_group rnic_fault_driver_group = {
	.attrs = rnic_fault_driver_attrs,
};

const struct attribute_group *rnic_fault_driver_groups[] = {
	&rnic_fault_driver_group,
	NULL
};

int rnic_fault_init(void)
{
	rnic_fault_wq = alloc_workqueue("rnic_emu_fault", WQ_UNBOUND, 1);
	return rnic_fault_wq ? 0 : -ENOMEM;
}

/* After the PCI drivers are unregistered: no interrupt or command can schedule more. */
void rnic_fault_exit(void)
{
	struct rnic_fault_item *it, *tmp;
	unsigned long flags;
	LIST_HEAD(items);

	spin_lock_irqsave(&rnic_fault_lock, flags);
	rnic_fault_exiting = true;
	list_splice_init(&rnic_fault_items, &items);
	spin_unlock_irqrestore(&rnic_fault_lock, flags);
	list_for_each_entry_safe(it, tmp, &items, node) {
		cancel_delayed_work_sync(&it->dw);
		if (!it->done)
			pci_dev_put(it->pdev);
		list_del(&it->node);
		kfree(it);
	}
	destroy_workqueue(rnic_fault_wq);
}
