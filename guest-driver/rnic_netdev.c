// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the RNIC's Ethernet netdev "rethN", parented to the RNIC's PCI
 * function and tied to the RDMA device's port (ib_core derives the RoCE GIDs from its
 * addresses; the guest's /init puts the RNIC's fabric address, RNIC_REG_IPV4, on it).
 *
 * With RNIC_CAP_ETH (contract minor 7, docs/registers.md "ETH_*") it is an Ethernet NIC:
 * the MAC is ETH_PERM_MAC (written back to ETH_MAC, the device's unicast filter and the
 * source of its RoCE frames), ARP works, the MTU is 68..9000 (ETH_MTU), frames go through
 * one transmit and one receive descriptor ring (rnic_netdev_ring.c), IFF_PROMISC sets
 * ETH_CTRL_PROMISC, and the carrier follows ETH_LINK, read at open and every second after
 * (the device raises no link interrupt). With RNIC_CAP_ETH_OFFLOAD (minor 9) it offers
 * scatter/gather, checksum offload and TSO/TSO6, done by the device, and takes the
 * device's word for received TCP/UDP checksums (ETH_CTRL_RX_CSUM, NETIF_F_RXCSUM). That
 * poll also starts the NAPI poll when a ring's head entry is done but no interrupt came
 * (a lost MSI-X message). ethtool: rnic_netdev_ethtool.c.
 *
 * The rings exist only while the netdev is up: ndo_open allocates and programs them and
 * enables the port, ndo_stop disables it and frees them once the device has stopped. A
 * running MTU change is a stop and a start with receive buffers of the new size. The
 * netdev is unregistered (so stopped) before the RNIC is quiesced and BAR0 unmapped
 * (rnic_ib_unregister() is the first step of remove()); a device that reads all-ones is
 * marked gone (rnic_nic_alive()): the carrier goes off and open fails with -ENODEV.
 *
 * Without RNIC_CAP_ETH (an older device) the netdev keeps the earlier behaviour: IFF_NOARP,
 * a MAC made from the fabric address (02:e1:a:b:c:d), carrier always on, every transmitted
 * frame counted (tx_dropped) and dropped, nothing received.
 *
 * The MSI-X vector of the rings is the RNIC's last one (vector 0 with a single vector); it
 * is shared with the CQs the round-robin puts there, and the interrupt hook
 * (rnic_nic_vec_event()) hands it to rnic_netdev_irq() as well.
 */
#include <linux/etherdevice.h>
#include <linux/io.h>
#include <linux/netdevice.h>

#include "rnic_ib.h"
#include "rnic_netdev.h"

bool rnic_eth_alive(struct rnic_eth *eth, u32 value)
{
	return value != 0xffffffff || rnic_nic_alive(eth->nic);
}

static void rnic_eth_write_mac(struct rnic_eth *eth, const u8 *mac)
{
	u64 v = 0;
	int i;

	/* ETH_MAC holds the bytes in wire order from bits [7:0] up. */
	for (i = 0; i < ETH_ALEN; i++)
		v |= (u64)mac[i] << (8 * i);
	writeq(v, eth->bar0 + ETH_MAC);
}

/* The MAC an older device gets, and the fallback when ETH_PERM_MAC holds no address. */
static void rnic_netdev_ipv4_mac(u32 ipv4, u8 mac[ETH_ALEN])
{
	mac[0] = 0x02;		/* locally administered, unicast */
	mac[1] = 0xe1;
	mac[2] = ipv4 >> 24;
	mac[3] = ipv4 >> 16;
	mac[4] = ipv4 >> 8;
	mac[5] = ipv4;
}

static void rnic_eth_set_perm_mac(struct rnic_eth *eth, u32 ipv4)
{
	struct net_device *ndev = eth->ndev;
	u64 v = readq(eth->bar0 + ETH_PERM_MAC);
	u8 mac[ETH_ALEN];
	int i;

	for (i = 0; i < ETH_ALEN; i++)
		mac[i] = v >> (8 * i);
	if (is_valid_ether_addr(mac)) {
		eth_hw_addr_set(ndev, mac);
	} else if (ipv4) {
		rnic_netdev_ipv4_mac(ipv4, mac);
		eth_hw_addr_set(ndev, mac);
		dev_warn(eth->dmadev, "ETH_PERM_MAC 0x%llx is no unicast MAC: using %pM (fabric address)\n",
			 (unsigned long long)v, mac);
	} else {
		eth_hw_addr_random(ndev);
		dev_warn(eth->dmadev, "ETH_PERM_MAC 0x%llx is no unicast MAC: using %pM (random)\n",
			 (unsigned long long)v, ndev->dev_addr);
	}
	rnic_eth_write_mac(eth, ndev->dev_addr);
}

/* Carrier from ETH_LINK. */
static void rnic_eth_link_update(struct rnic_eth *eth)
{
	struct net_device *ndev = eth->ndev;
	u32 link = ioread32(eth->bar0 + ETH_LINK);
	bool up = rnic_eth_alive(eth, link) && (link & RNIC_ETH_LINK_UP);

	if (up == netif_carrier_ok(ndev))
		return;
	if (up) {
		netif_carrier_on(ndev);
		netdev_info(ndev, "link up, %u Mb/s\n", ioread32(eth->bar0 + ETH_SPEED));
	} else {
		netif_carrier_off(ndev);
		netdev_info(ndev, "link down\n");
	}
}

static void rnic_eth_link_work(struct work_struct *work)
{
	struct rnic_eth *eth = container_of(to_delayed_work(work), struct rnic_eth, link_work);

	rnic_eth_link_update(eth);
	if (rnic_eth_kick_stalled(eth))
		atomic64_inc(&eth->napi_kicks);
	if (!test_bit(RNIC_NIC_GONE, &eth->nic->flags))
		schedule_delayed_work(&eth->link_work, msecs_to_jiffies(RNIC_ETH_LINK_POLL_MS));
}

static void rnic_eth_write_ctrl(struct rnic_eth *eth, u32 set, u32 clear, bool running)
{
	spin_lock_bh(&eth->ctrl_lock);
	eth->ctrl = (eth->ctrl & ~clear) | set;
	eth->running = running;
	iowrite32(eth->ctrl, eth->bar0 + ETH_CTRL);
	spin_unlock_bh(&eth->ctrl_lock);
}

/* Rings allocated and programmed, the port enabled, NAPI on and armed (rtnl held). */
static int rnic_eth_up(struct rnic_eth *eth)
{
	struct net_device *ndev = eth->ndev;
	void __iomem *bar0 = eth->bar0;
	u32 mtu = ndev->mtu;
	int ret;

	if (!rnic_nic_alive(eth->nic))
		return -ENODEV;
	eth->rx_buf_len = mtu + ETH_HLEN;
	ret = rnic_eth_rings_alloc(eth);
	if (ret)
		return ret;
	iowrite32(mtu, bar0 + ETH_MTU);
	if (ioread32(bar0 + ETH_MTU) != mtu) {
		netdev_err(ndev, "the device refused MTU %u (ETH_MTU reads %u)\n", mtu,
			   ioread32(bar0 + ETH_MTU));
		rnic_eth_rings_free(eth);
		return -EIO;
	}
	writeq(eth->tx_ring_dma, bar0 + ETH_TXQ_BASE);
	iowrite32(RNIC_ETH_TX_LOG2, bar0 + ETH_TXQ_LOG);
	iowrite32(eth->tx_pi, bar0 + ETH_TXQ_PI);
	writeq(eth->rx_ring_dma, bar0 + ETH_RXQ_BASE);
	iowrite32(RNIC_ETH_RX_LOG2, bar0 + ETH_RXQ_LOG);
	iowrite32(eth->rx_pi, bar0 + ETH_RXQ_PI);
	iowrite32(eth->vector, bar0 + ETH_VECTOR);
	netdev_reset_queue(ndev);
	napi_enable(&eth->napi);
	rnic_eth_write_ctrl(eth, RNIC_ETH_CTRL_RX_EN | RNIC_ETH_CTRL_TX_EN |
			    (eth->has_offload ? RNIC_ETH_CTRL_RX_CSUM : 0), 0, true);
	/*
	 * The enable starts both rings at index 0 with the producer indices written above;
	 * the receive doorbell once more is a no-op then, and keeps the buffers usable for a
	 * device that takes doorbells only while the ring is enabled.
	 */
	iowrite32(eth->rx_pi, bar0 + ETH_RXQ_PI);
	rnic_eth_arm(eth);
	netif_start_queue(ndev);
	rnic_eth_link_update(eth);
	schedule_delayed_work(&eth->link_work, msecs_to_jiffies(RNIC_ETH_LINK_POLL_MS));
	return 0;
}

/* Undoes rnic_eth_up(): nothing is freed before the device has stopped the rings. */
static void rnic_eth_down(struct rnic_eth *eth)
{
	struct net_device *ndev = eth->ndev;

	if (!eth->running)
		return;
	cancel_delayed_work_sync(&eth->link_work);
	napi_disable(&eth->napi);
	netif_tx_disable(ndev);
	rnic_eth_write_ctrl(eth, 0, RNIC_ETH_CTRL_RX_EN | RNIC_ETH_CTRL_TX_EN, false);
	(void)ioread32(eth->bar0 + ETH_CTRL);	/* the stop has reached the device */
	atomic_set(&eth->armed, 0);
	synchronize_irq(eth->irq);		/* no handler still looks at the NAPI context */
	netif_carrier_off(ndev);
	rnic_eth_rings_free(eth);
	netdev_reset_queue(ndev);
}

static int rnic_eth_open(struct net_device *ndev)
{
	return rnic_eth_up(netdev_priv(ndev));
}

static int rnic_eth_stop(struct net_device *ndev)
{
	rnic_eth_down(netdev_priv(ndev));
	return 0;
}

static int rnic_eth_change_mtu(struct net_device *ndev, int mtu)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	unsigned int old = ndev->mtu;
	int ret;

	if (!eth->running) {
		/* ETH_MTU also caps the RoCE path MTU: keep it current while down too. */
		iowrite32(mtu, eth->bar0 + ETH_MTU);
		if (ioread32(eth->bar0 + ETH_MTU) != mtu)
			return -EIO;
		WRITE_ONCE(ndev->mtu, mtu);
		return 0;
	}
	/* Receive buffers are sized for the MTU: stop, and start again with new ones. */
	rnic_eth_down(eth);
	WRITE_ONCE(ndev->mtu, mtu);
	ret = rnic_eth_up(eth);
	if (!ret)
		return 0;
	WRITE_ONCE(ndev->mtu, old);
	if (rnic_eth_up(eth))
		netdev_err(ndev, "cannot restart with MTU %u either: stopped until the next open\n",
			   old);
	return ret;
}

static int rnic_eth_set_mac(struct net_device *ndev, void *p)
{
	int ret = eth_prepare_mac_addr_change(ndev, p);

	if (ret)
		return ret;
	eth_commit_mac_addr_change(ndev, p);
	rnic_eth_write_mac(netdev_priv(ndev), ndev->dev_addr);
	return 0;
}

/* Atomic context (the address-list lock): one register write. */
static void rnic_eth_set_rx_mode(struct net_device *ndev)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	bool promisc = ndev->flags & IFF_PROMISC;

	spin_lock_bh(&eth->ctrl_lock);
	if (promisc != !!(eth->ctrl & RNIC_ETH_CTRL_PROMISC)) {
		eth->ctrl ^= RNIC_ETH_CTRL_PROMISC;
		iowrite32(eth->ctrl, eth->bar0 + ETH_CTRL);
	}
	spin_unlock_bh(&eth->ctrl_lock);
}

static void rnic_eth_get_stats64(struct net_device *ndev, struct rtnl_link_stats64 *s)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	struct rnic_eth_napi_stats *n = &eth->nstats;
	struct rnic_eth_xmit_stats *x = &eth->xstats;
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&n->syncp);
		s->rx_packets = n->rx_packets;
		s->rx_bytes = n->rx_bytes;
		s->rx_length_errors = n->rx_bad_desc;
		s->rx_errors = n->rx_bad_desc + n->rx_desc_errors;
		s->rx_dropped = n->rx_alloc_failures;
		s->tx_packets = n->tx_packets;
		s->tx_bytes = n->tx_bytes;
		s->tx_errors = n->tx_desc_errors;
	} while (u64_stats_fetch_retry(&n->syncp, start));
	do {
		start = u64_stats_fetch_begin(&x->syncp);
		s->tx_dropped = x->tx_dropped;
	} while (u64_stats_fetch_retry(&x->syncp, start));
}

/* The watchdog: log, and poll once in case the interrupt was lost. */
static void rnic_eth_tx_timeout(struct net_device *ndev, unsigned int txqueue)
{
	struct rnic_eth *eth = netdev_priv(ndev);

	atomic64_inc(&eth->tx_timeouts);
	if (!rnic_nic_alive(eth->nic))
		return;
	netdev_warn(ndev, "transmit timeout: driver index %u, cleaned %u, ETH_TXQ_CI %u\n",
		    READ_ONCE(eth->tx_pi), READ_ONCE(eth->tx_clean),
		    ioread32(eth->bar0 + ETH_TXQ_CI));
	napi_schedule(&eth->napi);
}

static const struct net_device_ops rnic_eth_ops = {
	.ndo_open		= rnic_eth_open,
	.ndo_stop		= rnic_eth_stop,
	.ndo_start_xmit		= rnic_eth_xmit,
	.ndo_change_mtu		= rnic_eth_change_mtu,
	.ndo_set_mac_address	= rnic_eth_set_mac,
	.ndo_validate_addr	= eth_validate_addr,
	.ndo_set_rx_mode	= rnic_eth_set_rx_mode,
	.ndo_get_stats64	= rnic_eth_get_stats64,
	.ndo_tx_timeout		= rnic_eth_tx_timeout,
	.ndo_features_check	= rnic_eth_features_check,
};

/* An older device (no RNIC_CAP_ETH): no datapath, every frame is counted and dropped. */
static netdev_tx_t rnic_eth_legacy_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	dev_kfree_skb_any(skb);
	rnic_eth_count_drop(netdev_priv(ndev));
	return NETDEV_TX_OK;
}

static const struct net_device_ops rnic_eth_legacy_ops = {
	.ndo_start_xmit		= rnic_eth_legacy_xmit,
	.ndo_get_stats64	= rnic_eth_get_stats64,
};

/**
 * rnic_netdev_create() - allocate and register the RNIC's netdev rethN
 * @nic: the RNIC, with BAR0 mapped and its MSI-X vectors set up
 *
 * Return: the netdev (down, carrier off until open finds the link up; an older device's
 * carrier is on) or an ERR_PTR.
 */
struct net_device *rnic_netdev_create(struct rnic_nic *nic)
{
	void __iomem *bar0 = nic->rd.bar0;
	u32 ipv4 = ioread32(bar0 + RNIC_REG_IPV4);
	struct net_device *ndev;
	struct rnic_eth *eth;
	u8 mac[ETH_ALEN];
	int ret;

	ndev = alloc_netdev(sizeof(*eth), "reth%d", NET_NAME_ENUM, ether_setup);
	if (!ndev)
		return ERR_PTR(-ENOMEM);
	SET_NETDEV_DEV(ndev, nic_dev(nic));
	eth = netdev_priv(ndev);
	eth->ndev = ndev;
	eth->nic = nic;
	eth->bar0 = bar0;
	eth->dmadev = nic_dev(nic);
	eth->has_eth = ioread32(bar0 + RNIC_REG_CAPS) & RNIC_CAP_ETH;
	eth->has_offload = eth->has_eth &&
			   (ioread32(bar0 + RNIC_REG_CAPS) & RNIC_CAP_ETH_OFFLOAD);
	spin_lock_init(&eth->ctrl_lock);
	u64_stats_init(&eth->nstats.syncp);
	u64_stats_init(&eth->xstats.syncp);
	ndev->ethtool_ops = &rnic_eth_ethtool_ops;
	ret = rnic_eth_ethtool_init(eth);
	if (ret)
		goto err_free;

	if (eth->has_eth) {
		ndev->netdev_ops = &rnic_eth_ops;
		ndev->min_mtu = RNIC_ETH_MIN_MTU;
		ndev->max_mtu = RNIC_ETH_MAX_MTU;
		ndev->priv_flags |= IFF_LIVE_ADDR_CHANGE;
		ndev->watchdog_timeo = RNIC_ETH_TX_TIMEOUT;
		if (eth->has_offload) {
			ndev->hw_features = NETIF_F_SG | NETIF_F_HW_CSUM | NETIF_F_TSO |
					    NETIF_F_TSO6 | NETIF_F_RXCSUM;
			ndev->features |= ndev->hw_features;
			netif_set_tso_max_size(ndev, RNIC_ETH_TSO_MAX_PAYLOAD);
		}
		eth->vector = nic->rd.nvec > 1 ? nic->rd.nvec - 1 : 0;
		eth->irq = nic->rd.vecs[eth->vector].irq;
		netif_napi_add(ndev, &eth->napi, rnic_eth_poll);
		INIT_DELAYED_WORK(&eth->link_work, rnic_eth_link_work);
		rnic_eth_set_perm_mac(eth, ipv4);
		iowrite32(ndev->mtu, bar0 + ETH_MTU);
		iowrite32(0, bar0 + ETH_CTRL);
		netif_carrier_off(ndev);
		WRITE_ONCE(nic->eth, eth);	/* the interrupt hook; nothing is armed yet */
	} else {
		ndev->netdev_ops = &rnic_eth_legacy_ops;
		ndev->flags |= IFF_NOARP;
		rnic_netdev_ipv4_mac(ipv4, mac);
		eth_hw_addr_set(ndev, mac);
	}

	ret = register_netdev(ndev);
	if (ret)
		goto err_unhook;
	if (!eth->has_eth)
		netif_carrier_on(ndev);
	return ndev;

err_unhook:
	if (eth->has_eth) {
		WRITE_ONCE(nic->eth, NULL);
		synchronize_irq(eth->irq);
	}
	rnic_eth_ethtool_fini(eth);
err_free:
	free_netdev(ndev);
	return ERR_PTR(ret);
}

/* Unregisters (so stops) the netdev and frees it; the RNIC's BAR0 is still mapped. */
void rnic_netdev_destroy(struct net_device *ndev)
{
	struct rnic_eth *eth = netdev_priv(ndev);

	unregister_netdev(ndev);
	if (eth->has_eth) {
		WRITE_ONCE(eth->nic->eth, NULL);
		synchronize_irq(eth->irq);
	}
	rnic_eth_ethtool_fini(eth);
	free_netdev(ndev);
}
