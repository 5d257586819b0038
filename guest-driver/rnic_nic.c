// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the RNIC function (PCI driver "rnic_emu").
 *
 * Probes the emulated RDMA NIC: BAR0 register block, contract checks, and one MSI-X
 * vector per vector the device reports in RNIC_REG_NUM_VECTORS. Not implemented yet:
 * the verbs engine behind QP_CTX_BASE / WQE_DB_IDX / CQE_CONS_IDX / MTT_BASE.
 */
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "rnic_common.h"

/* Largest MSI-X table a PCI function can have (Table Size field + 1). */
#define RNIC_MSIX_MAX_VECTORS	(PCI_MSIX_FLAGS_QSIZE + 1)

static const struct rnic_hw_desc rnic_nic_hw = {
	.label		= "RNIC",
	.id_magic	= RNIC_EMU_RNIC_ID_MAGIC,
	.bar0_size	= RNIC_EMU_RNIC_BAR0_SIZE,
	.reg_id		= RNIC_REG_ID,
	.reg_version	= RNIC_REG_VERSION,
	.reg_scratch	= RNIC_REG_SCRATCH,
	.reg_int_trigger = RNIC_REG_INT_TRIGGER,
};

static int rnic_nic_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct device *dev = &pdev->dev;
	struct rnic_dev *rd;
	u32 nvec;
	int ret;

	rd = kzalloc(sizeof(*rd), GFP_KERNEL);
	if (!rd)
		return -ENOMEM;

	ret = rnic_dev_setup(rd, pdev, &rnic_nic_hw, RNIC_EMU_NIC_DRV_NAME);
	if (ret)
		goto err_free;

	nvec = ioread32(rd->bar0 + RNIC_REG_NUM_VECTORS);
	if (nvec == 0 || nvec > RNIC_MSIX_MAX_VECTORS) {
		dev_err(dev, "RNIC reports %u MSI-X vectors (valid: 1..%u)\n",
			nvec, RNIC_MSIX_MAX_VECTORS);
		ret = -ENODEV;
		goto err_teardown;
	}

	ret = rnic_irq_setup(rd, nvec, RNIC_EMU_NIC_DRV_NAME);
	if (ret)
		goto err_teardown;

	pci_set_drvdata(pdev, rd);

	dev_info(dev, "rnic-emu RNIC: id 0x%08x version %u.%u, %u MSI-X vectors, BAR0 %pR\n",
		 rd->id, rnic_version_major(rd->version), rnic_version_minor(rd->version),
		 rd->nvec, &pdev->resource[0]);
	return 0;

err_teardown:
	rnic_dev_teardown(rd);
err_free:
	kfree(rd);
	return ret;
}

static void rnic_nic_remove(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);

	rnic_irq_teardown(rd);
	rnic_dev_teardown(rd);
	kfree(rd);
}

static const struct pci_device_id rnic_nic_ids[] = {
	{ PCI_DEVICE(RNIC_EMU_VENDOR_ID, RNIC_EMU_RNIC_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rnic_nic_ids);

static const struct attribute_group *rnic_nic_groups[] = {
	&rnic_common_attr_group,
	NULL
};

struct pci_driver rnic_nic_driver = {
	.name		= RNIC_EMU_NIC_DRV_NAME,
	.id_table	= rnic_nic_ids,
	.probe		= rnic_nic_probe,
	.remove		= rnic_nic_remove,
	/* Copied into .driver.dev_groups by pci_register_driver(). */
	.dev_groups	= rnic_nic_groups,
};
