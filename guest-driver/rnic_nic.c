// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the RNIC function (PCI driver "rnic_emu").
 *
 * Probe: BAR0 register block and contract checks (rnic_common.c), the verbs capability
 * and limits, a device reset, one MSI-X vector per vector the device reports (vector 0:
 * asynchronous errors, the others: CQs, the last one also the netdev's rings), the verbs
 * engine's tables (rnic_verbs.c, rnic_mtt.c), the character device /dev/rnic_emuN
 * (rnic_cdev.c) and the RDMA core's device rnicN with its netdev rethN (rnic_ib.c,
 * rnic_netdev*.c). sysfs adds `stats`
 * (the device's counters) and `driver_stats` (the driver's own); `bar1_aperture` shows the
 * aperture slots there, and only debugfs (rnic_emu-<PCI name>/bar1_aperture, root, a test
 * path and no ABI) can set one.
 *
 * Remove: quiesce, then free (see rnic_nic_remove()). Sizes the device reports are
 * bounded before anything is allocated from them.
 */
#include <linux/debugfs.h>
#include <linux/io.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "rnic_fault.h"
#include "rnic_ib.h"
#include "rnic_verbs.h"

static void rnic_nic_debugfs_add(struct rnic_nic *nic);

/* Largest MSI-X table a PCI function can have (Table Size field + 1). */
#define RNIC_MSIX_MAX_VECTORS	(PCI_MSIX_FLAGS_QSIZE + 1)
/* QP and CQ numbers travel in the 16-bit object field of the doorbells. */
#define RNIC_MAX_DB_OBJECTS	65536
/* MR index << 8 | key must fit a 32-bit key. */
#define RNIC_MAX_MR_INDEX	(1U << 24)

static const struct rnic_hw_desc rnic_nic_hw = {
	.label		= "RNIC",
	.id_magic	= RNIC_EMU_RNIC_ID_MAGIC,
	.bar0_size	= RNIC_EMU_RNIC_BAR0_SIZE,
	.reg_id		= RNIC_REG_ID,
	.reg_version	= RNIC_REG_VERSION,
	.reg_scratch	= RNIC_REG_SCRATCH,
	.reg_int_trigger = RNIC_REG_INT_TRIGGER,
};

static void rnic_nic_release(struct kref *ref)
{
	struct rnic_nic *nic = container_of(ref, struct rnic_nic, ref);

	kfree(nic->vec_armed);
	kfree(nic->vec_seq);
	kfree(nic);
}

void rnic_nic_put(struct rnic_nic *nic)
{
	kref_put(&nic->ref, rnic_nic_release);
}

/* docs/verbs.md §1.1: verbs capability and limits. */
static int rnic_nic_read_limits(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;
	struct device *dev = nic_dev(nic);
	u32 caps = ioread32(bar0 + RNIC_REG_CAPS);

	if (!(caps & RNIC_CAP_VERBS)) {
		dev_err(dev, "RNIC has no verbs engine (CAPS 0x%x lacks RNIC_CAP_VERBS)\n", caps);
		return -ENODEV;
	}
	nic->max_qp = ioread32(bar0 + RNIC_REG_MAX_QP);
	nic->max_cq = ioread32(bar0 + RNIC_REG_MAX_CQ);
	nic->max_mr = ioread32(bar0 + RNIC_REG_MAX_MR);
	nic->max_ring_log2 = ioread32(bar0 + RNIC_REG_MAX_RING_LOG2);
	if (!nic->max_qp || nic->max_qp > RNIC_MAX_DB_OBJECTS ||
	    !nic->max_cq || nic->max_cq > RNIC_MAX_DB_OBJECTS ||
	    nic->max_mr < 2 || nic->max_mr > RNIC_MAX_MR_INDEX || nic->max_ring_log2 > 15) {
		dev_err(dev, "RNIC limits out of range: %u QPs, %u CQs (1..%u), %u MRs (2..%u), ring log2 %u (max 15)\n",
			nic->max_qp, nic->max_cq, RNIC_MAX_DB_OBJECTS, nic->max_mr,
			RNIC_MAX_MR_INDEX, nic->max_ring_log2);
		return -ENODEV;
	}
	/* A QP and a CQ each have a page of BAR2 (the doorbell page): at most what it holds. */
	if (nic->max_qp > RNIC_DBP_CQ_PAGES / RNIC_DBP_PAGE ||
	    nic->max_cq > (RNIC_EMU_RNIC_DB_BAR_SIZE - RNIC_DBP_CQ_PAGES) / RNIC_DBP_PAGE) {
		dev_info(dev, "RNIC offers %u QPs and %u CQs; the driver uses what the doorbell page has pages for\n",
			 nic->max_qp, nic->max_cq);
		nic->max_qp = min_t(u32, nic->max_qp, RNIC_DBP_CQ_PAGES / RNIC_DBP_PAGE);
		nic->max_cq = min_t(u32, nic->max_cq,
				    (RNIC_EMU_RNIC_DB_BAR_SIZE - RNIC_DBP_CQ_PAGES) / RNIC_DBP_PAGE);
	}
	/* The MR context table is one DMA-coherent allocation: bound it (4 MiB). */
	nic->max_mr_hw = nic->max_mr;
	nic->max_mr = min_t(u32, nic->max_mr, RNIC_MAX_TABLE_BYTES / sizeof(struct rnic_mr_ctx));
	if (nic->max_mr != nic->max_mr_hw)
		dev_info(dev, "RNIC offers %u MR contexts; the driver uses %u\n",
			 nic->max_mr_hw, nic->max_mr);
	return 0;
}

static int rnic_nic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct device *dev = &pdev->dev;
	struct rnic_nic *nic;
	struct rnic_dev *rd;
	u32 nvec;
	int ret;

	nic = kzalloc(sizeof(*nic), GFP_KERNEL);
	if (!nic)
		return -ENOMEM;
	kref_init(&nic->ref);
	rd = &nic->rd;

	ret = rnic_dev_setup(rd, pdev, &rnic_nic_hw, RNIC_EMU_NIC_DRV_NAME);
	if (ret)
		goto err_free;

	/* Forget whatever an earlier driver left in the engine (tables it has freed). */
	iowrite32(RNIC_RESET_MAGIC, rd->bar0 + RNIC_REG_RESET);

	ret = rnic_nic_read_limits(nic);
	if (ret)
		goto err_teardown;

	nvec = ioread32(rd->bar0 + RNIC_REG_NUM_VECTORS);
	if (nvec == 0 || nvec > RNIC_MSIX_MAX_VECTORS) {
		dev_err(dev, "RNIC reports %u MSI-X vectors (valid: 1..%u)\n",
			nvec, RNIC_MSIX_MAX_VECTORS);
		ret = -ENODEV;
		goto err_teardown;
	}

	nic->vec_seq = kcalloc(nvec, sizeof(*nic->vec_seq), GFP_KERNEL);
	nic->vec_armed = kcalloc(nvec, sizeof(*nic->vec_armed), GFP_KERNEL);
	if (!nic->vec_seq || !nic->vec_armed) {
		ret = -ENOMEM;
		goto err_teardown;
	}
	rd->vec_event = rnic_nic_vec_event;

	ret = rnic_irq_setup(rd, nvec, RNIC_EMU_NIC_DRV_NAME);
	if (ret)
		goto err_teardown;

	ret = rnic_verbs_init(nic);
	if (ret)
		goto err_irq;

	pci_set_drvdata(pdev, rd);

	ret = rnic_cdev_register(nic);
	if (ret)
		goto err_verbs;

	ret = rnic_ib_register(nic);
	if (ret) {
		dev_err(dev, "registering with the RDMA core failed: %d\n", ret);
		goto err_cdev;
	}

	/* BAR1_APERTURE slots for every GPU bound now; later GPUs reprogram them. */
	rnic_p2p_nic_add(nic);
	rnic_nic_debugfs_add(nic);

	dev_info(dev, "rnic-emu RNIC: id 0x%08x version %u.%u, %u MSI-X vectors, BAR0 %pR, %u QPs %u CQs %u MRs, /dev/%s\n",
		 rd->id, rnic_version_major(rd->version), rnic_version_minor(rd->version),
		 rd->nvec, &pdev->resource[0], nic->max_qp, nic->max_cq, nic->max_mr,
		 nic->misc_name);
	return 0;

err_cdev:
	rnic_cdev_unregister(nic);
err_verbs:
	pci_set_drvdata(pdev, NULL);
	rnic_verbs_quiesce(nic);
	rnic_cdev_kill_files(nic);	/* files opened before the failure (none if cdev failed) */
	rnic_verbs_fini(nic);
err_irq:
	rnic_irq_teardown(rd);
err_teardown:
	rnic_dev_teardown(rd);
err_free:
	rnic_nic_put(nic);
	return ret;
}

static void rnic_nic_remove(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);
	struct rnic_nic *nic = to_nic(rd);

	/*
	 * Quiesce first, then free: no new file, the engine reset and stopped (it forgets every
	 * table, ring and MR), and only then the objects of open files and the tables freed.
	 */
	debugfs_remove_recursive(nic->debugfs);	/* waits for a write in progress */
	rnic_p2p_nic_remove(nic);
	rnic_ib_unregister(nic);
	rnic_cdev_unregister(nic);
	rnic_verbs_quiesce(nic);
	rnic_cdev_kill_files(nic);
	rnic_verbs_fini(nic);
	rnic_irq_teardown(rd);
	rnic_dev_teardown(rd);
	rnic_nic_put(nic);	/* files still open hold their own references */
}

/* sysfs `stats`: every device counter (docs/verbs.md §7), "name value" per line. */
static const char *const rnic_stat_names[RNIC_STAT_COUNT] = RNIC_STAT_NAMES_INIT;

static ssize_t stats_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);
	unsigned int i;
	int len = 0;

	for (i = 0; i < RNIC_STAT_COUNT; i++)
		len += sysfs_emit_at(buf, len, "%s %llu\n",
				     rnic_stat_names[i] ? rnic_stat_names[i] : "unknown",
				     (unsigned long long)readq(rd->bar0 + RNIC_STATS_BASE + 8 * i));
	return len;
}
static DEVICE_ATTR_RO(stats);

/* sysfs `driver_stats`: what the driver counts itself. */
static ssize_t driver_stats_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_nic *nic = to_nic(dev_get_drvdata(dev));
	struct rnic_drv_stats *s = &nic->stats;

	return sysfs_emit(buf,
			  "cmd_errors %lld\nmr_reg_failures %lld\nmr_pinned_pages %lld\npost_ring_full %lld\nstale_cqes %lld\nasync_errors %lld\np2p_fallbacks %lld\nmr_bounce_pages %lld\nzombie_bytes %lld\nrevoked_mrs %lld\nspurious_irqs %lld\nevents %lld\nevents_dropped %lld\ngone %d\n",
			  (long long)atomic64_read(&s->cmd_errors),
			  (long long)atomic64_read(&s->mr_reg_failures),
			  (long long)atomic64_read(&s->mr_pinned_pages),
			  (long long)atomic64_read(&s->post_ring_full),
			  (long long)atomic64_read(&s->stale_cqes),
			  (long long)atomic64_read(&s->async_errors),
			  (long long)atomic64_read(&s->p2p_fallbacks),
			  (long long)atomic64_read(&s->mr_bounce_pages),
			  (long long)atomic64_read(&s->zombie_bytes),
			  (long long)atomic64_read(&s->revoked_mrs),
			  (long long)atomic64_read(&nic->rd.spurious_irqs),
			  (long long)atomic64_read(&s->events),
			  (long long)atomic64_read(&s->events_dropped),
			  test_bit(RNIC_NIC_GONE, &nic->flags));
}
static DEVICE_ATTR_RO(driver_stats);

/*
 * sysfs `bar1_aperture`: RNIC_REG_NUM_GPUS and every BAR1_APERTURE slot. The driver
 * rewrites all slots whenever a GPU or an RNIC binds or unbinds (rnic_p2p.c); a slot
 * points the device's DMA at a bus address, so setting one by hand is debugfs's only.
 */
static ssize_t bar1_aperture_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);
	unsigned int i;
	int len;

	len = sysfs_emit(buf, "num_gpus %u\n", ioread32(rd->bar0 + RNIC_REG_NUM_GPUS));
	for (i = 0; i < RNIC_APERTURE_SLOTS; i++)
		len += sysfs_emit_at(buf, len, "slot%u 0x%llx\n", i,
				     (unsigned long long)readq(rd->bar0 + BAR1_APERTURE + 8 * i));
	return len;
}

static DEVICE_ATTR_RO(bar1_aperture);

/*
 * debugfs rnic_emu-<PCI name>/bar1_aperture (write only, root): "SLOT ADDR" sets one
 * slot, for tests of the device's aperture checks (rnic-verbs-check). Not an interface:
 * debugfs is absent under lockdown and may change with the driver.
 */
static ssize_t rnic_dbg_aperture_write(struct file *file, const char __user *ubuf,
				       size_t count, loff_t *ppos)
{
	struct rnic_dev *rd = file->private_data;
	char buf[64] = {};
	unsigned int slot;
	u64 addr;

	if (*ppos || count >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, count))
		return -EFAULT;
	if (sscanf(buf, "%u %llx", &slot, &addr) != 2 || slot >= RNIC_APERTURE_SLOTS)
		return -EINVAL;
	dev_info(&rd->pdev->dev, "bar1_aperture: slot %u set to 0x%llx through debugfs\n", slot,
		 addr);
	writeq(addr, rd->bar0 + BAR1_APERTURE + 8 * slot);
	return count;
}

static const struct file_operations rnic_dbg_aperture_fops = {
	.owner	= THIS_MODULE,
	.open	= simple_open,
	.write	= rnic_dbg_aperture_write,
};

static void rnic_nic_debugfs_add(struct rnic_nic *nic)
{
	char name[48];

	snprintf(name, sizeof(name), "rnic_emu-%s", pci_name(nic->rd.pdev));
	nic->debugfs = debugfs_create_dir(name, NULL);
	debugfs_create_file("bar1_aperture", 0200, nic->debugfs, &nic->rd,
			    &rnic_dbg_aperture_fops);
}

/* sysfs `ipv4`: the RNIC's fabric address (RNIC_REG_IPV4), dotted; 0.0.0.0: no fabric. */
static ssize_t ipv4_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);
	u32 ip = ioread32(rd->bar0 + RNIC_REG_IPV4);

	return sysfs_emit(buf, "%pI4h\n", &ip);
}
static DEVICE_ATTR_RO(ipv4);

static struct attribute *rnic_nic_stats_attrs[] = {
	&dev_attr_stats.attr,
	&dev_attr_ipv4.attr,
	&dev_attr_driver_stats.attr,
	&dev_attr_bar1_aperture.attr,
	NULL
};

const struct attribute_group rnic_nic_stats_group = {
	.attrs = rnic_nic_stats_attrs,
};

static const struct pci_device_id rnic_nic_ids[] = {
	{ PCI_DEVICE(RNIC_EMU_VENDOR_ID, RNIC_EMU_RNIC_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rnic_nic_ids);

static const struct attribute_group *rnic_nic_groups[] = {
	&rnic_common_attr_group,
	&rnic_nic_stats_group,
	NULL
};

struct pci_driver rnic_nic_driver = {
	.name		= RNIC_EMU_NIC_DRV_NAME,
	.id_table	= rnic_nic_ids,
	.probe		= rnic_nic_probe,
	.remove		= rnic_nic_remove,
	/* Copied into .driver.dev_groups by pci_register_driver(). */
	.dev_groups	= rnic_nic_groups,
	/* Driver attributes: fault_stats (rnic_fault.c). */
	.groups		= rnic_fault_driver_groups,
};
