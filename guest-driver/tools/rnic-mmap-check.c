// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-mmap-check: a QP's number is not given to another QP while a mapping of its
 * doorbell-page page lives (docs/ibverbs.md, "Mappings and numbers"). Built against
 * libibverbs by images/build.sh, like rnic-async-check. CQs follow the same rule in the
 * driver (rnic_num.c), but libibverbs shows no CQ's device number, so only QPs are checked.
 *
 * For a QP of rnic0:
 *   1. create it and find the mappings of the uverbs file that its creation added
 *      (/proc/self/maps): its rings and its doorbell-page page;
 *   2. map each of them a second time (what a forked child or a careless library keeps);
 *   3. destroy the object (the provider unmaps its own mappings);
 *   4. create another one: it must get a different number, since the old page is still
 *      mapped and a store to it must never reach the new object;
 *   5. unmap the copies, destroy it, create a third: the old number is free again (the
 *      kernel hands out the lowest free number), so nothing leaked.
 *
 * Usage: rnic-mmap-check. Prints "mmap-qp: ok old N new M again K (C mappings copied)" or
 * "mmap-qp: FAIL <why>"; exit status 0 when it passed.
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define DEV_NAME	"rnic0"
#define MAX_MAPS	16

struct map {
	unsigned long start, len, offset;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static int fail(const char *what, const char *why)
{
	printf("mmap-%s: FAIL %s (%s)\n", what, why, strerror(errno));
	return 1;
}

/* The mappings of uverbs files in this process, at most MAX_MAPS. */
static int uverbs_maps(struct map *m)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		return -1;
	while (n < MAX_MAPS && fgets(line, sizeof(line), f)) {
		unsigned long s, e, off;

		if (!strstr(line, "/dev/infiniband/uverbs"))
			continue;
		if (sscanf(line, "%lx-%lx %*s %lx", &s, &e, &off) != 3)
			continue;
		m[n++] = (struct map){ .start = s, .len = e - s, .offset = off };
	}
	fclose(f);
	return n;
}

static int known(const struct map *m, int n, const struct map *x)
{
	for (int i = 0; i < n; i++)
		if (m[i].start == x->start)
			return 1;
	return 0;
}

/* An RC QP whose send and receive queues complete on @cq. */
static struct ibv_qp *create_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr init = {
		.qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
	};

	return ibv_create_qp(pd, &init);
}

static int check(struct ibv_cq *cq)
{
	struct map before[MAX_MAPS], after[MAX_MAPS], copies[MAX_MAPS];
	struct ibv_qp *a, *b, *c;
	uint32_t old, new, again;
	int nb, na, nc = 0, i;

	nb = uverbs_maps(before);
	a = create_qp(cq);
	if (!a)
		return fail("qp", "creating the QP");
	na = uverbs_maps(after);
	if (nb < 0 || na < 0)
		return fail("qp", "reading /proc/self/maps");
	for (i = 0; i < na; i++) {
		void *p;

		if (known(before, nb, &after[i]))
			continue;
		p = mmap(NULL, after[i].len, PROT_READ | PROT_WRITE, MAP_SHARED, ctx->cmd_fd,
			 (off_t)after[i].offset);
		if (p == MAP_FAILED)
			return fail("qp", "mapping the QP's pages a second time");
		copies[nc++] = (struct map){ .start = (unsigned long)p, .len = after[i].len };
	}
	if (nc < 3)
		return fail("qp", "the QP added fewer than three mappings (two rings, doorbell page)");
	old = a->qp_num;

	ibv_destroy_qp(a);
	b = create_qp(cq);
	if (!b)
		return fail("qp", "creating the second QP");
	new = b->qp_num;
	ibv_destroy_qp(b);
	if (new == old) {
		printf("mmap-qp: FAIL number %u reused while its doorbell page is still mapped\n", old);
		return 1;
	}

	for (i = 0; i < nc; i++)
		munmap((void *)copies[i].start, copies[i].len);
	c = create_qp(cq);
	if (!c)
		return fail("qp", "creating the third QP");
	again = c->qp_num;
	ibv_destroy_qp(c);
	if (again != old) {
		printf("mmap-qp: FAIL number %u not free again after the last unmap (got %u)\n",
		       old, again);
		return 1;
	}
	printf("mmap-qp: ok old %u new %u again %u (%d mappings copied)\n", old, new, again, nc);
	return 0;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_cq *cq;
	int i, rc;

	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), DEV_NAME))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		return fail("setup", "ibv_open_device " DEV_NAME);
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		return fail("setup", "ibv_alloc_pd");
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		return fail("setup", "ibv_create_cq");
	rc = check(cq);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return rc;
}
