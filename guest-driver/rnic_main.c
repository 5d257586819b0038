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
#include "rnic_fault.h"
#include "rnic_verbs.h"

/*
 * The node index of this guest in a multi-node topology (docs/fabric.md): `rnic-emu run`
 * puts rnic_emu.node=N on the kernel command line, which modprobe passes here. QUERY_DEVICE
 * reports it; -1 (the default) means unknown.
 */
int rnic_node = -1;
module_param_named(node, rnic_node, int, 0444);
MODULE_PARM_DESC(node, "node index of this guest in the topology (-1: unknown)");

static int __init rnic_emu_init(void)
{
	int ret;

	if (rnic_node < -1) {
		pr_warn("rnic_emu: node=%d is not a node index, ignored\n", rnic_node);
		rnic_node = -1;
	}
	ret = rnic_fault_init();
	if (ret)
		return ret;
	ret = pci_register_driver(&rnic_nic_driver);
	if (ret)
		goto err_fault;

	ret = pci_register_driver(&rnic_gpu_driver);
	if (ret)
		goto err_unregister_nic;

	return 0;

err_unregister_nic:
	pci_unregister_driver(&rnic_nic_driver);
err_fault:
	rnic_fault_exit();
	return ret;
}

static void __exit rnic_emu_exit(void)
{
	pci_unregister_driver(&rnic_gpu_driver);
	pci_unregister_driver(&rnic_nic_driver);
	rnic_fault_exit();
}

module_init(rnic_emu_init);
module_exit(rnic_emu_exit);

MODULE_DESCRIPTION("rnic-emu: emulated PCIe RDMA NIC and GPU (vfio-user) guest driver");
MODULE_LICENSE("GPL");
