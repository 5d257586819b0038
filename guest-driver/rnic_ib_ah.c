// SPDX-License-Identifier: GPL-2.0
/*
 * Address handles (contract minor 16): what a UD send names its destination with. The
 * device keeps no AH table; each UD send WQE carries the address vector (struct
 * rnic_ud_av) after its header, so an AH is that vector, filled from the RoCE address
 * ib_core resolved (rdma_create_user_ah() has looked up the next-hop MAC before it calls
 * us): destination GID, MAC, traffic class, hop limit, and the index of the source GID
 * in the device's table (the same index as ib_core's: rnic_ib_gid.c). A user AH hands
 * its vector to the provider in the response, which writes it into each WQE.
 */

#include <rdma/ib_addr.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

#include "rnic_ib.h"
#include "rnic_verbs.h"
#include "uapi/rnic_ib_abi.h"

static struct rnic_ib_ah *to_iah(struct ib_ah *ibah)
{
	return container_of(ibah, struct rnic_ib_ah, ibah);
}

int rnic_ib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata)
{
	struct rnic_nic *nic = ib_nic(ibah->device);
	struct rdma_ah_attr *attr = init->ah_attr;
	struct rnic_ib_create_ah_resp resp = {};
	struct rnic_ib_ah *ah = to_iah(ibah);
	const struct ib_global_route *grh;

	BUILD_BUG_ON(sizeof(resp.av) != sizeof(ah->av));
	if (!rnic_nic_ud(nic))
		return -EOPNOTSUPP;
	if (!rnic_ib_udata_in_ok(ibah->device, udata, "create_ah"))
		return -EINVAL;
	/* RoCEv2 only: every address carries a GRH (the IP header). */
	if (attr->type != RDMA_AH_ATTR_TYPE_ROCE || !(rdma_ah_get_ah_flags(attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(attr);
	if (grh->sgid_index >= RNIC_GID_TABLE_LEN || rdma_is_multicast_addr((struct in6_addr *)grh->dgid.raw)) {
		dev_warn_ratelimited(&ibah->device->dev, "create_ah: sgid_index %u, dgid %pI6: not a unicast route of this port\n",
				     grh->sgid_index, grh->dgid.raw);
		return -EINVAL;
	}
	memset(&ah->av, 0, sizeof(ah->av));
	memcpy(&ah->av.dest_gid_lo, grh->dgid.raw, 8);
	memcpy(&ah->av.dest_gid_hi, grh->dgid.raw + 8, 8);
	ah->av.dest_mac = rnic_ib_mac_to_dev(attr->roce.dmac);
	ah->av.traffic_class = grh->traffic_class;
	ah->av.hop_limit = grh->hop_limit;
	ah->av.sgid_index = grh->sgid_index;
	if (!udata)
		return 0;
	memcpy(resp.av, &ah->av, sizeof(resp.av));
	return ib_respond_udata(udata, resp);
}

int rnic_ib_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr)
{
	const struct rnic_ud_av *av = &to_iah(ibah)->av;
	union ib_gid dgid;

	memcpy(dgid.raw, &av->dest_gid_lo, 8);
	memcpy(dgid.raw + 8, &av->dest_gid_hi, 8);
	memset(attr, 0, sizeof(*attr));
	attr->type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(attr, 1);
	rdma_ah_set_grh(attr, &dgid, 0, av->sgid_index, av->hop_limit, av->traffic_class);
	rnic_ib_mac_from_dev(av->dest_mac, attr->roce.dmac);
	return 0;
}

int rnic_ib_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;	/* nothing on the device: the vector lives in the WQEs */
}
