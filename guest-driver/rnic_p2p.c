// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the registry of GPUs and RNICs behind GPUDirect RDMA, the
 * BAR1_APERTURE programming (docs/gpudirect.md) and the P2P path decision.
 *
 * The registry is module-wide because both PCI drivers live in this module and either may
 * bind first. One mutex guards both lists and every aperture write, so an RNIC always
 * sees one consistent slot assignment; a spinlock also guards the GPU list, for the
 * lookups REG_MR makes under a file's mutex (which ranks below the registry mutex).
 *
 * A GPU going away is first taken out of the list and out of every RNIC's aperture slots
 * (the RNIC can no longer DMA to it), then every RNIC revokes the MRs over its memory
 * (rnic_mr_dmabuf.c), so that no pin is left for the P2PDMA teardown to wait for.
 */
#include <linux/io.h>
#include <linux/mutex.h>
#include <linux/pci.h>

#include "rnic_p2p.h"
#include "rnic_verbs.h"

static DEFINE_MUTEX(rnic_p2p_lock);
static DEFINE_SPINLOCK(rnic_p2p_gpus_spin);	/* also guards rnic_p2p_gpus */
static LIST_HEAD(rnic_p2p_gpus);	/* struct rnic_p2p_gpu, sorted by pci_name() */
static LIST_HEAD(rnic_p2p_nics);	/* struct rnic_nic via p2p_node */

/* Writes every slot of one RNIC. Called with rnic_p2p_lock held. */
static void rnic_p2p_program(struct rnic_nic *nic)
{
	struct rnic_p2p_gpu *gpu;
	unsigned int slot = 0;

	lockdep_assert_held(&rnic_p2p_lock);
	list_for_each_entry(gpu, &rnic_p2p_gpus, node) {
		if (slot >= RNIC_APERTURE_SLOTS) {
			dev_warn(nic_dev(nic), "GPU %s gets no BAR1_APERTURE slot (only %u): no peer-to-peer DMA to it\n",
				 pci_name(gpu->pdev), RNIC_APERTURE_SLOTS);
			continue;
		}
		writeq(gpu->bus_addr, nic->rd.bar0 + BAR1_APERTURE + 8 * slot);
		dev_dbg(nic_dev(nic), "BAR1_APERTURE slot %u: GPU %s BAR1 bus address 0x%llx\n",
			slot, pci_name(gpu->pdev), gpu->bus_addr);
		slot++;
	}
	for (; slot < RNIC_APERTURE_SLOTS; slot++)
		writeq(0, nic->rd.bar0 + BAR1_APERTURE + 8 * slot);
}

static void rnic_p2p_program_all(void)
{
	struct rnic_nic *nic;

	list_for_each_entry(nic, &rnic_p2p_nics, p2p_node)
		rnic_p2p_program(nic);
}

void rnic_p2p_gpu_add(struct rnic_p2p_gpu *gpu)
{
	struct rnic_p2p_gpu *pos;

	mutex_lock(&rnic_p2p_lock);
	list_for_each_entry(pos, &rnic_p2p_gpus, node)
		if (strcmp(pci_name(gpu->pdev), pci_name(pos->pdev)) < 0)
			break;
	spin_lock(&rnic_p2p_gpus_spin);
	list_add_tail(&gpu->node, &pos->node);	/* before pos, or at the end */
	spin_unlock(&rnic_p2p_gpus_spin);
	rnic_p2p_program_all();
	mutex_unlock(&rnic_p2p_lock);
}

void rnic_p2p_gpu_remove(struct rnic_p2p_gpu *gpu)
{
	struct rnic_nic *nic;

	mutex_lock(&rnic_p2p_lock);
	spin_lock(&rnic_p2p_gpus_spin);
	list_del(&gpu->node);
	spin_unlock(&rnic_p2p_gpus_spin);
	rnic_p2p_program_all();
	list_for_each_entry(nic, &rnic_p2p_nics, p2p_node)
		rnic_nic_revoke_provider(nic, gpu->pdev);
	mutex_unlock(&rnic_p2p_lock);
}

void rnic_p2p_nic_add(struct rnic_nic *nic)
{
	mutex_lock(&rnic_p2p_lock);
	list_add_tail(&nic->p2p_node, &rnic_p2p_nics);
	rnic_p2p_program(nic);
	mutex_unlock(&rnic_p2p_lock);
}

void rnic_p2p_nic_remove(struct rnic_nic *nic)
{
	mutex_lock(&rnic_p2p_lock);
	list_del(&nic->p2p_node);
	mutex_unlock(&rnic_p2p_lock);
}

struct pci_dev *rnic_p2p_find_provider(phys_addr_t phys)
{
	struct pci_dev *found = NULL;
	struct rnic_p2p_gpu *gpu;

	spin_lock(&rnic_p2p_gpus_spin);
	list_for_each_entry(gpu, &rnic_p2p_gpus, node) {
		if (phys >= gpu->phys && phys - gpu->phys < gpu->size) {
			found = pci_dev_get(gpu->pdev);
			break;
		}
	}
	spin_unlock(&rnic_p2p_gpus_spin);
	return found;
}

bool rnic_p2p_provider_live(struct pci_dev *provider)
{
	struct rnic_p2p_gpu *gpu;
	bool live = false;

	spin_lock(&rnic_p2p_gpus_spin);
	list_for_each_entry(gpu, &rnic_p2p_gpus, node)
		live |= gpu->pdev == provider;
	spin_unlock(&rnic_p2p_gpus_spin);
	return live;
}

static bool rnic_p2p_is_ancestor(struct pci_dev *bridge, struct pci_dev *dev)
{
	struct pci_dev *up;

	for (up = pci_upstream_bridge(dev); up; up = pci_upstream_bridge(up))
		if (up == bridge)
			return true;
	return false;
}

/*
 * The lowest bridge above both functions decides: a PCIe switch port means the TLPs turn
 * around in the switch; a root port (two functions of one slot, or one root port above
 * both) or no common bridge at all means they pass the root complex.
 */
u32 rnic_p2p_path(struct pci_dev *client, struct pci_dev *provider)
{
	struct pci_dev *common;
	int type;

	for (common = pci_upstream_bridge(client); common; common = pci_upstream_bridge(common))
		if (rnic_p2p_is_ancestor(common, provider))
			break;
	if (!common || !pci_is_pcie(common))
		return RNIC_MR_PATH_P2P_HOST_BRIDGE;
	type = pci_pcie_type(common);
	if (type == PCI_EXP_TYPE_UPSTREAM || type == PCI_EXP_TYPE_DOWNSTREAM)
		return RNIC_MR_PATH_P2P_SWITCH;
	return RNIC_MR_PATH_P2P_HOST_BRIDGE;
}
