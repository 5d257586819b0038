// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the GPU function (PCI driver "rnic_emu_gpu").
 *
 * Probes the emulated GPU: BAR0 control registers, contract checks, two MSI-X vectors,
 * and reports its BAR1 memory aperture (size, bus address) in sysfs. BAR1 is deliberately
 * not requested: user space maps it through /sys/bus/pci/devices/<bdf>/resource1, which
 * CONFIG_IO_STRICT_DEVMEM forbids for regions a driver has claimed. Not implemented yet:
 * the copy/fill/reduce engine and publishing BAR1 as P2PDMA memory.
 */
#include <linux/io-64-nonatomic-lo-hi.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "rnic_common.h"

/* MSI-X vectors of the GPU function (fixed by the device model). */
#define RNIC_GPU_NUM_VECTORS	2

struct rnic_gpu {
	struct rnic_dev common;		/* drvdata points here */
	u64 reg_mem_size;		/* GPU_REG_MEM_SIZE as read at probe */
};

static const struct rnic_hw_desc rnic_gpu_hw = {
	.label		= "GPU",
	.id_magic	= RNIC_EMU_GPU_ID_MAGIC,
	.bar0_size	= RNIC_EMU_GPU_BAR0_SIZE,
	.reg_id		= GPU_REG_ID,
	.reg_version	= GPU_REG_VERSION,
	.reg_scratch	= GPU_REG_SCRATCH,
	.reg_int_trigger = GPU_REG_INT_TRIGGER,
};

static int rnic_gpu_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	const int mem_bar = RNIC_EMU_GPU_MEM_BAR;
	struct device *dev = &pdev->dev;
	resource_size_t mem_len;
	struct rnic_gpu *gpu;
	int ret;

	gpu = kzalloc(sizeof(*gpu), GFP_KERNEL);
	if (!gpu)
		return -ENOMEM;

	ret = rnic_dev_setup(&gpu->common, pdev, &rnic_gpu_hw, RNIC_EMU_GPU_DRV_NAME);
	if (ret)
		goto err_free;

	mem_len = pci_resource_len(pdev, mem_bar);
	if (!(pci_resource_flags(pdev, mem_bar) & IORESOURCE_MEM) || !mem_len) {
		dev_err(dev, "BAR%d %pR is not a memory aperture\n",
			mem_bar, &pdev->resource[mem_bar]);
		ret = -ENODEV;
		goto err_teardown;
	}

	gpu->reg_mem_size = ioread64_lo_hi(gpu->common.bar0 + GPU_REG_MEM_SIZE);
	if (gpu->reg_mem_size != mem_len)
		dev_warn(dev, "GPU_REG_MEM_SIZE reports %llu bytes but BAR%d is %llu bytes\n",
			 gpu->reg_mem_size, mem_bar, (unsigned long long)mem_len);

	ret = rnic_irq_setup(&gpu->common, RNIC_GPU_NUM_VECTORS, RNIC_EMU_GPU_DRV_NAME);
	if (ret)
		goto err_teardown;

	pci_set_drvdata(pdev, &gpu->common);

	dev_info(dev, "rnic-emu GPU: id 0x%08x version %u.%u, %u MSI-X vectors, BAR0 %pR, BAR%d %pR (%llu bytes), GPU_REG_MEM_SIZE %llu\n",
		 gpu->common.id, rnic_version_major(gpu->common.version),
		 rnic_version_minor(gpu->common.version), gpu->common.nvec,
		 &pdev->resource[0], mem_bar, &pdev->resource[mem_bar],
		 (unsigned long long)mem_len, gpu->reg_mem_size);
	return 0;

err_teardown:
	rnic_dev_teardown(&gpu->common);
err_free:
	kfree(gpu);
	return ret;
}

static void rnic_gpu_remove(struct pci_dev *pdev)
{
	struct rnic_dev *rd = pci_get_drvdata(pdev);
	struct rnic_gpu *gpu = container_of(rd, struct rnic_gpu, common);

	rnic_irq_teardown(rd);
	rnic_dev_teardown(rd);
	kfree(gpu);
}

static ssize_t mem_size_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct pci_dev *pdev = to_pci_dev(dev);

	return sysfs_emit(buf, "%llu\n",
			  (unsigned long long)pci_resource_len(pdev, RNIC_EMU_GPU_MEM_BAR));
}
static DEVICE_ATTR_RO(mem_size);

static ssize_t mem_bus_addr_show(struct device *dev, struct device_attribute *attr, char *buf)
{
	struct pci_dev *pdev = to_pci_dev(dev);

	/*
	 * The address peers use for P2P DMA. pci_bus_address() equals pci_resource_start()
	 * where the host bridge does not translate (x86, QEMU q35).
	 */
	return sysfs_emit(buf, "0x%llx\n",
			  (unsigned long long)pci_bus_address(pdev, RNIC_EMU_GPU_MEM_BAR));
}
static DEVICE_ATTR_RO(mem_bus_addr);

static struct attribute *rnic_gpu_attrs[] = {
	&dev_attr_mem_size.attr,
	&dev_attr_mem_bus_addr.attr,
	NULL
};

static const struct attribute_group rnic_gpu_attr_group = {
	.attrs = rnic_gpu_attrs,
};

static const struct attribute_group *rnic_gpu_groups[] = {
	&rnic_common_attr_group,
	&rnic_gpu_attr_group,
	NULL
};

static const struct pci_device_id rnic_gpu_ids[] = {
	{ PCI_DEVICE(RNIC_EMU_VENDOR_ID, RNIC_EMU_GPU_DEVICE_ID) },
	{ }
};
MODULE_DEVICE_TABLE(pci, rnic_gpu_ids);

struct pci_driver rnic_gpu_driver = {
	.name		= RNIC_EMU_GPU_DRV_NAME,
	.id_table	= rnic_gpu_ids,
	.probe		= rnic_gpu_probe,
	.remove		= rnic_gpu_remove,
	/* Copied into .driver.dev_groups by pci_register_driver(). */
	.dev_groups	= rnic_gpu_groups,
};
