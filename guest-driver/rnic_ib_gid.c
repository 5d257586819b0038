// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-emu guest driver: the port's GID table (contract 1.8; docs/fabric.md "Addressing").
 *
 * ib_core keeps the RoCE GID table of rnicN equal to the addresses of rethN and hands each
 * entry it adds or removes to the driver (add_gid/del_gid). The driver writes the entry
 * into its table in guest memory (GID_TABLE_BASE) and has the device take it
 * (CMD_SET_GID): the port then takes RoCE packets to that address, and a QP whose address
 * vector names the entry as its source GID sends from it (rnic_ib_verbs.c). So the RNIC's
 * addresses are the netdev's, as on a real RoCE NIC. A device of an earlier minor has no
 * table: ib_core's entries are its own, and the port has its fabric address only.
 */
#include <linux/string.h>

#include "rnic_ib.h"

/* Entry attr->index of the device's table: @gid, or nothing (NULL). */
static int rnic_ib_set_gid(const struct ib_gid_attr *attr, const union ib_gid *gid)
{
	struct rnic_nic *nic = to_rnic_ibdev(attr->device)->nic;
	struct rnic_gid_entry *e;
	int ret;

	if (!nic->gid_table)
		return 0;
	if (attr->index >= RNIC_GID_TABLE_LEN)
		return -EINVAL;
	mutex_lock(&nic->cmd_lock);
	e = &nic->gid_table[attr->index];
	memset(e, 0, sizeof(*e));
	if (gid) {
		memcpy(&e->gid_lo, &gid->raw[0], sizeof(e->gid_lo));
		memcpy(&e->gid_hi, &gid->raw[8], sizeof(e->gid_hi));
		e->flags = RNIC_GID_FLAG_VALID;
	}
	ret = rnic_cmd(nic, RNIC_CMD_SET_GID, attr->index);
	mutex_unlock(&nic->cmd_lock);
	if (ret)
		dev_warn_ratelimited(nic_dev(nic), "SET_GID %u (%pI6): %d\n", attr->index,
				     gid ? gid->raw : attr->gid.raw, ret);
	return ret;
}

int rnic_ib_add_gid(const struct ib_gid_attr *attr, void **context)
{
	return rnic_ib_set_gid(attr, &attr->gid);
}

int rnic_ib_del_gid(const struct ib_gid_attr *attr, void **context)
{
	return rnic_ib_set_gid(attr, NULL);
}

/* Whether @gid is an address of the port now (a QP to it stays on this RNIC). */
bool rnic_ib_gid_is_own(struct rnic_nic *nic, const u8 *gid)
{
	struct rnic_gid_entry e;
	unsigned int i;
	bool own = false;

	if (!nic->gid_table)
		return false;
	mutex_lock(&nic->cmd_lock);
	for (i = 0; i < RNIC_GID_TABLE_LEN && !own; i++) {
		e = nic->gid_table[i];
		own = e.flags & RNIC_GID_FLAG_VALID && !memcmp(&e.gid_lo, gid, 8) &&
		      !memcmp(&e.gid_hi, gid + 8, 8);
	}
	mutex_unlock(&nic->cmd_lock);
	return own;
}
