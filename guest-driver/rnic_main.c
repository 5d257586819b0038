// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: module entry points.
 *
 * One module, two PCI drivers: "rnic_emu" for the emulated RDMA NIC and "rnic_emu_gpu" for
 * the emulated GPU (see rnic_nic.c, rnic_gpu.c).
 */
#include <linux/module.h>
#include <linux/pci.h>

#include "rnic_common.h"

static int __init rnic_emu_init(void)
{
	int ret;

	ret = pci_register_driver(&rnic_nic_driver);
	if (ret)
		return ret;

	ret = pci_register_driver(&rnic_gpu_driver);
	if (ret)
		goto err_unregister_nic;

	return 0;

err_unregister_nic:
	pci_unregister_driver(&rnic_nic_driver);
	return ret;
}

static void __exit rnic_emu_exit(void)
{
	pci_unregister_driver(&rnic_gpu_driver);
	pci_unregister_driver(&rnic_nic_driver);
}

module_init(rnic_emu_init);
module_exit(rnic_emu_exit);

MODULE_DESCRIPTION("rnic-emu: emulated PCIe RDMA NIC and GPU (vfio-user) guest driver");
MODULE_LICENSE("GPL");
