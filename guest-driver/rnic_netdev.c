// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the RNIC's Ethernet netdev, for the RDMA core's RoCE GID table.
 *
 * ib_core derives a RoCE port's GIDs from the IP addresses of the netdev tied to the port
 * (roce_gid_mgmt). The RNIC's fabric address (RNIC_REG_IPV4, docs/fabric.md) therefore
 * lives on a netdev of its own, "rethN", parented to the RNIC's PCI function, with a MAC
 * made from that address (02:e1:a:b:c:d). The guest's /init puts the address on it (from
 * the RNIC's sysfs `ipv4`), and ib_core adds the GID ::ffff:a.b.c.d.
 *
 * What it does not model: this netdev carries no IP traffic. The device has no Ethernet
 * datapath towards the guest; transmitted packets are dropped and counted (tx_dropped),
 * nothing is ever received. RDMA traffic goes through the verbs engine, not through here.
 */
#include <linux/etherdevice.h>
#include <linux/netdevice.h>

#include "rnic_ib.h"

static netdev_tx_t rnic_netdev_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	dev_core_stats_tx_dropped_inc(ndev);
	dev_kfree_skb_any(skb);
	return NETDEV_TX_OK;
}

static const struct net_device_ops rnic_netdev_ops = {
	.ndo_start_xmit	= rnic_netdev_xmit,
};

void rnic_netdev_mac(u32 ipv4, u8 mac[ETH_ALEN])
{
	mac[0] = 0x02;		/* locally administered, unicast */
	mac[1] = 0xe1;
	mac[2] = ipv4 >> 24;
	mac[3] = ipv4 >> 16;
	mac[4] = ipv4 >> 8;
	mac[5] = ipv4;
}

struct net_device *rnic_netdev_create(struct pci_dev *pdev, u32 ipv4)
{
	struct net_device *ndev;
	u8 mac[ETH_ALEN];
	int ret;

	ndev = alloc_netdev(0, "reth%d", NET_NAME_ENUM, ether_setup);
	if (!ndev)
		return ERR_PTR(-ENOMEM);
	SET_NETDEV_DEV(ndev, &pdev->dev);
	ndev->netdev_ops = &rnic_netdev_ops;
	ndev->flags |= IFF_NOARP;
	ndev->mtu = ETH_DATA_LEN;
	rnic_netdev_mac(ipv4, mac);
	eth_hw_addr_set(ndev, mac);

	ret = register_netdev(ndev);
	if (ret) {
		free_netdev(ndev);
		return ERR_PTR(ret);
	}
	netif_carrier_on(ndev);
	return ndev;
}

void rnic_netdev_destroy(struct net_device *ndev)
{
	unregister_netdev(ndev);
	free_netdev(ndev);
}
