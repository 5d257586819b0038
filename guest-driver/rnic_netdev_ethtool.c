// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: ethtool for the netdev rethN (rnic_netdev.c).
 *
 * - drvinfo: driver "rnic_emu", the PCI function as bus_info, the register contract's
 *   version (major.minor) as fw_version;
 * - link: the carrier (ETH_LINK); link settings: ETH_SPEED Mb/s, full duplex, port "other",
 *   no autonegotiation; speed and duplex unknown while the link is down;
 * - rings: the fixed ring sizes and the contract's largest;
 * - statistics (ethtool -S): the port's device counters read from BAR0
 *   (RNIC_STATS_BASE + 8 * RNIC_STAT_*, named as the `stats` sysfs attribute names them:
 *   the Ethernet port's frames, bytes, errors, no-buffer and filtered drops, the RoCE
 *   packets and their ICRC, sequence, duplicate, retransmission and RNR events, and on a
 *   device of contract 1.9 the ones over IPv6, the responses the requester refused, and
 *   (RNIC_CAP_ETH_OFFLOAD) the checksums and TSO frames and segments; of 1.10 the RoCE
 *   packets dropped for their P_Key or an impossible source), then the driver's
 *   own ring counters. Once the RNIC is gone the last values read are shown.
 *
 * An older device (no RNIC_CAP_ETH) has no Ethernet port: its netdev lists only the
 * frames it dropped.
 */
#include <linux/ethtool.h>
#include <linux/io.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/slab.h>

#include "rnic_ib.h"
#include "rnic_netdev.h"

/* The device counters of the port, in ethtool -S order. */
static const u16 rnic_eth_hw_stats[] = {
	RNIC_STAT_ETH_TX_FRAMES,
	RNIC_STAT_ETH_TX_BYTES,
	RNIC_STAT_ETH_TX_ERRORS,
	RNIC_STAT_ETH_RX_FRAMES,
	RNIC_STAT_ETH_RX_BYTES,
	RNIC_STAT_ETH_RX_NO_BUFFER,
	RNIC_STAT_ETH_RX_FILTERED,
	RNIC_STAT_ETH_RX_ERRORS,
	RNIC_STAT_PKTS_SENT,
	RNIC_STAT_PKTS_RECEIVED,
	RNIC_STAT_PKTS_DROPPED,
	RNIC_STAT_ICRC_ERRORS,
	RNIC_STAT_OUT_OF_SEQUENCE,
	RNIC_STAT_DUPLICATE_REQUESTS,
	RNIC_STAT_RETRANSMITS,
	RNIC_STAT_TIMEOUTS,
	RNIC_STAT_RNR_NAKS_SENT,
	RNIC_STAT_RNR_RETRIES,
	/* contract 1.9: the last RNIC_ETH_HW_MINOR9 entries */
	RNIC_STAT_PKTS_SENT_IPV6,
	RNIC_STAT_PKTS_RECEIVED_IPV6,
	RNIC_STAT_BAD_RESPONSES,
	RNIC_STAT_ETH_TX_CSUM,
	RNIC_STAT_ETH_TSO_FRAMES,
	RNIC_STAT_ETH_TSO_SEGMENTS,
	/* contract 1.10: the last RNIC_ETH_HW_MINOR10 entries */
	RNIC_STAT_PKEY_VIOLATIONS,
	RNIC_STAT_ROCE_BAD_SOURCE,
	/* contract 1.13: the last RNIC_ETH_HW_MINOR13 entries */
	RNIC_STAT_UC_DROPPED,
	/* contract 1.16: the last RNIC_ETH_HW_MINOR16 entries */
	RNIC_STAT_UD_SENT,
	RNIC_STAT_UD_RECEIVED,
	RNIC_STAT_UD_DROPPED,
	RNIC_STAT_QKEY_VIOLATIONS,
};
#define RNIC_ETH_HW_MINOR16	4
#define RNIC_ETH_HW_MINOR13	(1 + RNIC_ETH_HW_MINOR16)
#define RNIC_ETH_HW_MINOR10	(2 + RNIC_ETH_HW_MINOR13)
#define RNIC_ETH_HW_MINOR9	(6 + RNIC_ETH_HW_MINOR10)

static const char *const rnic_eth_hw_names[RNIC_STAT_COUNT] = RNIC_STAT_NAMES_INIT;

enum rnic_eth_sw_stat {
	RNIC_SW_RX_PACKETS,
	RNIC_SW_RX_BYTES,
	RNIC_SW_RX_BAD_DESC,
	RNIC_SW_RX_DESC_ERRORS,
	RNIC_SW_RX_ALLOC_FAILURES,
	RNIC_SW_TX_PACKETS,
	RNIC_SW_TX_BYTES,
	RNIC_SW_TX_DESC_ERRORS,
	RNIC_SW_TX_WAKES,
	RNIC_SW_NAPI_POLLS,
	RNIC_SW_TX_STOPS,
	RNIC_SW_TX_TIMEOUTS,
	RNIC_SW_NAPI_KICKS,
	RNIC_SW_TX_LINEARIZED,
	RNIC_SW_TX_CSUM_HELP,
	RNIC_SW_TX_DROPPED,		/* last: the only one an older device has */
	RNIC_SW_COUNT
};

static const char *const rnic_eth_sw_names[RNIC_SW_COUNT] = {
	[RNIC_SW_RX_PACKETS]		= "rx_packets",
	[RNIC_SW_RX_BYTES]		= "rx_bytes",
	[RNIC_SW_RX_BAD_DESC]		= "rx_bad_descriptors",
	[RNIC_SW_RX_DESC_ERRORS]	= "rx_descriptor_errors",
	[RNIC_SW_RX_ALLOC_FAILURES]	= "rx_alloc_failures",
	[RNIC_SW_TX_PACKETS]		= "tx_packets",
	[RNIC_SW_TX_BYTES]		= "tx_bytes",
	[RNIC_SW_TX_DESC_ERRORS]	= "tx_descriptor_errors",
	[RNIC_SW_TX_WAKES]		= "tx_queue_wakes",
	[RNIC_SW_NAPI_POLLS]		= "napi_polls",
	[RNIC_SW_TX_STOPS]		= "tx_queue_stops",
	[RNIC_SW_TX_TIMEOUTS]		= "tx_timeouts",
	[RNIC_SW_NAPI_KICKS]		= "napi_kicks",
	[RNIC_SW_TX_LINEARIZED]		= "tx_linearized",
	[RNIC_SW_TX_CSUM_HELP]		= "tx_csum_in_driver",
	[RNIC_SW_TX_DROPPED]		= "tx_dropped",
};

static unsigned int rnic_eth_n_hw(const struct rnic_eth *eth)
{
	if (!eth->has_eth)
		return 0;
	if (rnic_version_minor(eth->nic->rd.version) < 9)
		return ARRAY_SIZE(rnic_eth_hw_stats) - RNIC_ETH_HW_MINOR9;
	if (rnic_version_minor(eth->nic->rd.version) < 10)
		return ARRAY_SIZE(rnic_eth_hw_stats) - RNIC_ETH_HW_MINOR10;
	if (rnic_version_minor(eth->nic->rd.version) < 13)
		return ARRAY_SIZE(rnic_eth_hw_stats) - RNIC_ETH_HW_MINOR13;
	if (rnic_version_minor(eth->nic->rd.version) < 16)
		return ARRAY_SIZE(rnic_eth_hw_stats) - RNIC_ETH_HW_MINOR16;
	return ARRAY_SIZE(rnic_eth_hw_stats);
}

static unsigned int rnic_eth_first_sw(const struct rnic_eth *eth)
{
	return eth->has_eth ? 0 : RNIC_SW_TX_DROPPED;
}

int rnic_eth_ethtool_init(struct rnic_eth *eth)
{
	if (!eth->has_eth)
		return 0;
	eth->hw_stats = kcalloc(ARRAY_SIZE(rnic_eth_hw_stats), sizeof(*eth->hw_stats),
				GFP_KERNEL);
	return eth->hw_stats ? 0 : -ENOMEM;
}

void rnic_eth_ethtool_fini(struct rnic_eth *eth)
{
	kfree(eth->hw_stats);
	eth->hw_stats = NULL;
}

static void rnic_eth_get_drvinfo(struct net_device *ndev, struct ethtool_drvinfo *info)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	struct rnic_dev *rd = &eth->nic->rd;

	strscpy(info->driver, RNIC_EMU_NIC_DRV_NAME, sizeof(info->driver));
	strscpy(info->bus_info, pci_name(rd->pdev), sizeof(info->bus_info));
	snprintf(info->fw_version, sizeof(info->fw_version), "%u.%u",
		 rnic_version_major(rd->version), rnic_version_minor(rd->version));
}

static int rnic_eth_get_link_ksettings(struct net_device *ndev,
				       struct ethtool_link_ksettings *cmd)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	u32 speed = SPEED_UNKNOWN;

	ethtool_link_ksettings_zero_link_mode(cmd, supported);
	ethtool_link_ksettings_zero_link_mode(cmd, advertising);
	cmd->base.port = PORT_OTHER;
	cmd->base.autoneg = AUTONEG_DISABLE;
	cmd->base.duplex = DUPLEX_UNKNOWN;
	if (eth->has_eth && netif_carrier_ok(ndev)) {
		speed = ioread32(eth->bar0 + ETH_SPEED);
		if (!rnic_eth_alive(eth, speed) || !speed || speed > INT_MAX)
			speed = SPEED_UNKNOWN;
		else
			cmd->base.duplex = DUPLEX_FULL;
	}
	cmd->base.speed = speed;
	return 0;
}

static void rnic_eth_get_ringparam(struct net_device *ndev, struct ethtool_ringparam *ring,
				   struct kernel_ethtool_ringparam *kring,
				   struct netlink_ext_ack *extack)
{
	struct rnic_eth *eth = netdev_priv(ndev);

	if (!eth->has_eth)
		return;
	ring->rx_max_pending = rnic_eth_ring_size(RNIC_ETH_MAX_RING_LOG2);
	ring->tx_max_pending = rnic_eth_ring_size(RNIC_ETH_MAX_RING_LOG2);
	ring->rx_pending = rnic_eth_ring_size(RNIC_ETH_RX_LOG2);
	ring->tx_pending = rnic_eth_ring_size(RNIC_ETH_TX_LOG2);
}

static int rnic_eth_get_sset_count(struct net_device *ndev, int sset)
{
	struct rnic_eth *eth = netdev_priv(ndev);

	if (sset != ETH_SS_STATS)
		return -EOPNOTSUPP;
	return rnic_eth_n_hw(eth) + RNIC_SW_COUNT - rnic_eth_first_sw(eth);
}

static void rnic_eth_get_strings(struct net_device *ndev, u32 sset, u8 *data)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	unsigned int i;

	if (sset != ETH_SS_STATS)
		return;
	for (i = 0; i < rnic_eth_n_hw(eth); i++)
		ethtool_puts(&data, rnic_eth_hw_names[rnic_eth_hw_stats[i]]);
	for (i = rnic_eth_first_sw(eth); i < RNIC_SW_COUNT; i++)
		ethtool_puts(&data, rnic_eth_sw_names[i]);
}

static void rnic_eth_get_ethtool_stats(struct net_device *ndev, struct ethtool_stats *stats,
				       u64 *data)
{
	struct rnic_eth *eth = netdev_priv(ndev);
	struct rnic_eth_napi_stats *n = &eth->nstats;
	struct rnic_eth_xmit_stats *x = &eth->xstats;
	u64 sw[RNIC_SW_COUNT];
	unsigned int i, start;

	if (rnic_eth_n_hw(eth) && rnic_nic_alive(eth->nic)) {
		for (i = 0; i < rnic_eth_n_hw(eth); i++)
			eth->hw_stats[i] = readq(eth->bar0 + RNIC_STATS_BASE +
						 8 * rnic_eth_hw_stats[i]);
	}
	for (i = 0; i < rnic_eth_n_hw(eth); i++)
		*data++ = eth->hw_stats[i];

	do {
		start = u64_stats_fetch_begin(&n->syncp);
		sw[RNIC_SW_RX_PACKETS] = n->rx_packets;
		sw[RNIC_SW_RX_BYTES] = n->rx_bytes;
		sw[RNIC_SW_RX_BAD_DESC] = n->rx_bad_desc;
		sw[RNIC_SW_RX_DESC_ERRORS] = n->rx_desc_errors;
		sw[RNIC_SW_RX_ALLOC_FAILURES] = n->rx_alloc_failures;
		sw[RNIC_SW_TX_PACKETS] = n->tx_packets;
		sw[RNIC_SW_TX_BYTES] = n->tx_bytes;
		sw[RNIC_SW_TX_DESC_ERRORS] = n->tx_desc_errors;
		sw[RNIC_SW_TX_WAKES] = n->tx_wakes;
		sw[RNIC_SW_NAPI_POLLS] = n->polls;
	} while (u64_stats_fetch_retry(&n->syncp, start));
	do {
		start = u64_stats_fetch_begin(&x->syncp);
		sw[RNIC_SW_TX_STOPS] = x->tx_stops;
		sw[RNIC_SW_TX_LINEARIZED] = x->tx_linearized;
		sw[RNIC_SW_TX_CSUM_HELP] = x->tx_csum_help;
		sw[RNIC_SW_TX_DROPPED] = x->tx_dropped;
	} while (u64_stats_fetch_retry(&x->syncp, start));
	sw[RNIC_SW_TX_TIMEOUTS] = atomic64_read(&eth->tx_timeouts);
	sw[RNIC_SW_NAPI_KICKS] = atomic64_read(&eth->napi_kicks);
	for (i = rnic_eth_first_sw(eth); i < RNIC_SW_COUNT; i++)
		*data++ = sw[i];
}

const struct ethtool_ops rnic_eth_ethtool_ops = {
	.get_drvinfo		= rnic_eth_get_drvinfo,
	.get_link		= ethtool_op_get_link,
	.get_link_ksettings	= rnic_eth_get_link_ksettings,
	.get_ringparam		= rnic_eth_get_ringparam,
	.get_sset_count		= rnic_eth_get_sset_count,
	.get_strings		= rnic_eth_get_strings,
	.get_ethtool_stats	= rnic_eth_get_ethtool_stats,
};
