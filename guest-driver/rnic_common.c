// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: BAR0 bring-up, MSI-X vectors and sysfs attributes shared by the
 * RNIC and GPU functions.
 *
 * Register contract: include/uapi/rnic_emu_regs.h (generated from device/core/src/regs.rs).
 * Only BAR0 is requested here. The GPU's BAR1 aperture stays unclaimed on purpose: with
 * CONFIG_IO_STRICT_DEVMEM a claimed region could no longer be mapped by user space
 * through /sys/bus/pci/devices/<bdf>/resource1.
 */
#include <linux/device.h>
#include <linux/dma-mapping.h>
#include <linux/interrupt.h>
#include <linux/jiffies.h>
#include <linux/kernel.h>
#include <linux/slab.h>

#include "rnic_common.h"

/* Values written to and read back from the scratch register at probe. */
static const u32 rnic_scratch_patterns[] = { 0x5a5aa5a5, 0xa5a55a5a, 0xffffffff, 0x00000000 };

static int rnic_check_contract(struct rnic_dev *rd)
{
	const struct rnic_hw_desc *hw = rd->hw;
	struct device *dev = &rd->pdev->dev;
	unsigned int i;
	u32 val;

	rd->id = ioread32(rd->bar0 + hw->reg_id);
	if (rd->id != hw->id_magic) {
		dev_err(dev, "%s ID register reads 0x%08x, expected 0x%08x: not an rnic-emu %s\n",
			hw->label, rd->id, hw->id_magic, hw->label);
		return -ENODEV;
	}

	rd->version = ioread32(rd->bar0 + hw->reg_version);
	if (rnic_version_major(rd->version) != rnic_version_major(RNIC_EMU_CONTRACT_VERSION)) {
		dev_err(dev, "%s register contract version %u.%u is not supported (driver speaks %u.x)\n",
			hw->label, rnic_version_major(rd->version),
			rnic_version_minor(rd->version),
			rnic_version_major(RNIC_EMU_CONTRACT_VERSION));
		return -ENODEV;
	}

	/* The last pattern is the register's reset value, so the device is left as found. */
	for (i = 0; i < ARRAY_SIZE(rnic_scratch_patterns); i++) {
		iowrite32(rnic_scratch_patterns[i], rd->bar0 + hw->reg_scratch);
		val = ioread32(rd->bar0 + hw->reg_scratch);
		if (val != rnic_scratch_patterns[i]) {
			dev_err(dev, "%s scratch register reads back 0x%08x after writing 0x%08x\n",
				hw->label, val, rnic_scratch_patterns[i]);
			return -EIO;
		}
	}

	return 0;
}

/**
 * rnic_dev_setup() - enable the function, map BAR0 and check the register contract
 * @rd: state to fill in (zeroed by the caller)
 * @pdev: the PCI function being probed
 * @hw: the function's BAR0 contract
 * @res_name: owner name for the BAR0 region in /proc/iomem
 *
 * Return: 0, or a negative errno with everything undone.
 */
int rnic_dev_setup(struct rnic_dev *rd, struct pci_dev *pdev,
		   const struct rnic_hw_desc *hw, const char *res_name)
{
	struct device *dev = &pdev->dev;
	int ret;

	rd->pdev = pdev;
	rd->hw = hw;
	init_waitqueue_head(&rd->irq_wq);
	mutex_init(&rd->irq_test_lock);
	atomic_set(&rd->irq_test_vec, -1);

	ret = pci_enable_device(pdev);
	if (ret) {
		dev_err(dev, "cannot enable PCI device: %d\n", ret);
		return ret;
	}

	if (!(pci_resource_flags(pdev, 0) & IORESOURCE_MEM) ||
	    pci_resource_len(pdev, 0) < hw->bar0_size) {
		dev_err(dev, "BAR0 %pR is not a memory BAR of at least %pa bytes\n",
			&pdev->resource[0], &hw->bar0_size);
		ret = -ENODEV;
		goto err_disable;
	}

	ret = pci_request_region(pdev, 0, res_name);
	if (ret) {
		dev_err(dev, "cannot claim BAR0 %pR: %d\n", &pdev->resource[0], ret);
		goto err_disable;
	}

	rd->bar0 = pci_iomap(pdev, 0, hw->bar0_size);
	if (!rd->bar0) {
		dev_err(dev, "cannot map BAR0 %pR\n", &pdev->resource[0]);
		ret = -ENOMEM;
		goto err_release;
	}

	pci_set_master(pdev);

	ret = dma_set_mask_and_coherent(dev, DMA_BIT_MASK(64));
	if (ret) {
		dev_err(dev, "no usable 64-bit DMA configuration: %d\n", ret);
		goto err_unmap;
	}

	ret = rnic_check_contract(rd);
	if (ret)
		goto err_unmap;

	return 0;

err_unmap:
	pci_clear_master(pdev);
	pci_iounmap(pdev, rd->bar0);
	rd->bar0 = NULL;
err_release:
	pci_release_region(pdev, 0);
err_disable:
	pci_disable_device(pdev);
	mutex_destroy(&rd->irq_test_lock);
	return ret;
}

/* Undoes rnic_dev_setup(), in reverse. */
void rnic_dev_teardown(struct rnic_dev *rd)
{
	struct pci_dev *pdev = rd->pdev;

	pci_clear_master(pdev);
	pci_iounmap(pdev, rd->bar0);
	rd->bar0 = NULL;
	pci_release_region(pdev, 0);
	pci_disable_device(pdev);
	mutex_destroy(&rd->irq_test_lock);
}

bool rnic_dev_reads_ones(struct rnic_dev *rd, unsigned int reg)
{
	return ioread32(rd->bar0 + reg) == 0xffffffff;
}

static irqreturn_t rnic_irq_handler(int irq, void *data)
{
	struct rnic_vec *vec = data;
	struct rnic_dev *rd = vec->rd;
	bool expected;

	atomic64_inc(&vec->count);
	/* The hook always runs (it counts); the self-test's vector is always expected. */
	expected = !rd->vec_event || rd->vec_event(rd, vec->index);
	expected |= atomic_read(&rd->irq_test_vec) == (int)vec->index;
	wake_up(&rd->irq_wq);
	if (!expected) {
		atomic64_inc(&rd->spurious_irqs);
		return IRQ_NONE;
	}
	return IRQ_HANDLED;
}

/**
 * rnic_irq_setup() - allocate up to @max_vecs MSI-X vectors and request each of them
 * @rd: state set up by rnic_dev_setup()
 * @max_vecs: vectors wanted (at least one must be granted)
 * @drv_name: prefix of the irq names shown in /proc/interrupts
 *
 * Return: 0, or a negative errno with everything undone.
 */
int rnic_irq_setup(struct rnic_dev *rd, unsigned int max_vecs, const char *drv_name)
{
	struct pci_dev *pdev = rd->pdev;
	struct device *dev = &pdev->dev;
	struct rnic_vec *vec;
	unsigned int i;
	int nvec, ret;

	nvec = pci_alloc_irq_vectors(pdev, 1, max_vecs, PCI_IRQ_MSIX);
	if (nvec < 0) {
		dev_err(dev, "cannot allocate MSI-X vectors (wanted up to %u): %d\n",
			max_vecs, nvec);
		return nvec;
	}
	if ((unsigned int)nvec < max_vecs)
		dev_warn(dev, "got %d of %u MSI-X vectors\n", nvec, max_vecs);

	rd->vecs = kcalloc(nvec, sizeof(*rd->vecs), GFP_KERNEL);
	if (!rd->vecs) {
		ret = -ENOMEM;
		goto err_free_vectors;
	}

	for (i = 0; i < (unsigned int)nvec; i++) {
		vec = &rd->vecs[i];
		vec->rd = rd;
		vec->index = i;
		atomic64_set(&vec->count, 0);
		snprintf(vec->name, sizeof(vec->name), "%s-%s-%u", drv_name, pci_name(pdev), i);

		ret = pci_irq_vector(pdev, i);
		if (ret < 0) {
			dev_err(dev, "no Linux irq for MSI-X vector %u: %d\n", i, ret);
			goto err_free_irqs;
		}
		vec->irq = ret;

		ret = request_irq(vec->irq, rnic_irq_handler, 0, vec->name, vec);
		if (ret) {
			dev_err(dev, "cannot request irq %d (MSI-X vector %u): %d\n",
				vec->irq, i, ret);
			goto err_free_irqs;
		}
	}

	rd->nvec = nvec;
	return 0;

err_free_irqs:
	while (i--)
		free_irq(rd->vecs[i].irq, &rd->vecs[i]);
	kfree(rd->vecs);
	rd->vecs = NULL;
err_free_vectors:
	pci_free_irq_vectors(pdev);
	return ret;
}

/* Undoes rnic_irq_setup(), in reverse. */
void rnic_irq_teardown(struct rnic_dev *rd)
{
	unsigned int i = rd->nvec;

	while (i--)
		free_irq(rd->vecs[i].irq, &rd->vecs[i]);
	rd->nvec = 0;
	kfree(rd->vecs);
	rd->vecs = NULL;
	pci_free_irq_vectors(rd->pdev);
}

/* sysfs: the driver's dev_groups exist only while the driver is bound, so drvdata is valid. */

static ssize_t hw_id_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);

	return sysfs_emit(buf, "0x%08x\n", rd->id);
}
static DEVICE_ATTR_RO(hw_id);

static ssize_t hw_version_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);

	return sysfs_emit(buf, "%u.%u\n", rnic_version_major(rd->version),
			  rnic_version_minor(rd->version));
}
static DEVICE_ATTR_RO(hw_version);

static ssize_t irq_counts_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);
	unsigned int i;
	int len = 0;

	for (i = 0; i < rd->nvec; i++)
		len += sysfs_emit_at(buf, len, "%s%lld", i ? " " : "",
				     (long long)atomic64_read(&rd->vecs[i].count));
	len += sysfs_emit_at(buf, len, "\n");
	return len;
}
static DEVICE_ATTR_RO(irq_counts);

/*
 * Interrupt self-test: writing N asks the device to raise MSI-X vector N and waits for
 * that vector's handler to run.
 */
static ssize_t irq_test_store(struct device *dev, struct device_attribute *attr,
			      const char *buf, size_t count)
{
	struct rnic_dev *rd = dev_get_drvdata(dev);
	struct rnic_vec *vec;
	unsigned int n;
	long left;
	s64 before;
	int ret;

	ret = kstrtouint(buf, 0, &n);
	if (ret)
		return ret;
	if (n >= rd->nvec)
		return -EINVAL;
	vec = &rd->vecs[n];

	ret = mutex_lock_interruptible(&rd->irq_test_lock);
	if (ret)
		return ret;
	before = atomic64_read(&vec->count);
	atomic_set(&rd->irq_test_vec, n);
	iowrite32(n, rd->bar0 + rd->hw->reg_int_trigger);
	left = wait_event_killable_timeout(rd->irq_wq, atomic64_read(&vec->count) != before,
					   msecs_to_jiffies(RNIC_IRQ_TEST_TIMEOUT_MS));
	atomic_set(&rd->irq_test_vec, -1);
	mutex_unlock(&rd->irq_test_lock);
	if (left < 0)
		return left;

	if (!left) {
		dev_warn(dev, "irq_test: MSI-X vector %u (irq %d) did not fire within %u ms\n",
			 n, vec->irq, RNIC_IRQ_TEST_TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	return count;
}
static DEVICE_ATTR_WO(irq_test);

static struct attribute *rnic_common_attrs[] = {
	&dev_attr_hw_id.attr,
	&dev_attr_hw_version.attr,
	&dev_attr_irq_counts.attr,
	&dev_attr_irq_test.attr,
	NULL
};

const struct attribute_group rnic_common_attr_group = {
	.attrs = rnic_common_attrs,
};
