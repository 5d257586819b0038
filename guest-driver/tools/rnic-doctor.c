// SPDX-License-Identifier: GPL-2.0
/*
 * rnic-doctor: the GPUDirect RDMA deployment checklist (docs/timing.md, "rnic-doctor"),
 * each item with a verdict (PASS, WARN or FAIL), what was read, and the fix:
 *
 *   same_switch   the NIC and the GPU below one PCIe switch (lowest common bridge)
 *   acs           ACS Request Redirect / Completion Redirect / P2P Egress Control off on
 *                 every port between them
 *   iommu         IOMMU off or in passthrough (identity) mode for the NIC
 *   p2pdma        the GPU's BAR1 published as P2PDMA memory
 *   p2p_distance  the kernel's verdict for the pair (a strict-P2P MR over GPU memory)
 *   aperture      the GPU's BAR1 bus address programmed in a BAR1_APERTURE slot
 *   mps_mrrs      Max Payload / Max Read Request Size of the NIC (MRRS >= 512 bytes)
 *   bar1_size     BAR1 exposes all of the GPU's memory
 *   link          the NIC's negotiated link speed and width equal its capability
 *   kernel        Linux >= 5.12 (dma-buf MRs)
 *   p2p_fallbacks the driver's silent host-bounce fallbacks so far (should be 0)
 *   aer           an AER capability on the NIC and no errors counted
 *
 *   rnic-doctor [--json] [--nic BDF] [--gpu BDF]
 *
 * Exit status: 0 when no item fails, 1 when one does, 2 when the checks could not run.
 * Reads sysfs and config space (root), and registers one 4 KiB MR over GPU memory with
 * the strict-P2P flag (nothing is bounced, nothing is left registered). Static, libc only.
 */
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/utsname.h>

#include "rnic_tool_verbs.h"

enum verdict { PASS, WARN, FAIL };
static const char *const verdict_name[] = { "PASS", "WARN", "FAIL" };

struct item {
	const char *name;
	enum verdict v;
	char read[320];
	char fix[320];
};

#define MAX_ITEMS 16
static struct item items[MAX_ITEMS];
static unsigned int n_items;

static void report(const char *name, enum verdict v, const char *fix, const char *fmt, ...)
{
	struct item *it;
	va_list ap;

	if (n_items == MAX_ITEMS)
		return;
	it = &items[n_items++];
	it->name = name;
	it->v = v;
	va_start(ap, fmt);
	vsnprintf(it->read, sizeof(it->read), fmt, ap);
	va_end(ap);
	snprintf(it->fix, sizeof(it->fix), "%s", v == PASS ? "" : fix);
}

/* ---- sysfs and config space ---- */

static int read_file(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return 0;
}

static int read_dev_attr(const char *bdf, const char *attr, char *buf, size_t len)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/%s", bdf, attr);
	return read_file(path, buf, len);
}

struct cfg {
	uint8_t b[4096];
	size_t len;
};

static int read_cfg(const char *bdf, struct cfg *c)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/config", bdf);
	f = fopen(path, "r");
	if (!f)
		return -1;
	c->len = fread(c->b, 1, sizeof(c->b), f);
	fclose(f);
	return c->len >= 64 ? 0 : -1;
}

static uint16_t cfg16(const struct cfg *c, size_t off)
{
	return off + 2 <= c->len ? (uint16_t)(c->b[off] | c->b[off + 1] << 8) : 0;
}

static uint32_t cfg32(const struct cfg *c, size_t off)
{
	return off + 4 <= c->len ? (uint32_t)cfg16(c, off) | (uint32_t)cfg16(c, off + 2) << 16 : 0;
}

/* Offset of standard capability id, or 0 (at most 48 links followed). */
static size_t find_cap(const struct cfg *c, uint8_t id)
{
	size_t at = c->b[0x34] & ~3u;
	int guard = 48;

	if (!(cfg16(c, 0x06) & 0x10))
		return 0;
	while (at >= 0x40 && at + 2 <= c->len && guard--) {
		if (c->b[at] == id)
			return at;
		at = c->b[at + 1] & ~3u;
	}
	return 0;
}

/* Offset of extended capability id, or 0 (needs the 4 KiB config space). */
static size_t find_ext_cap(const struct cfg *c, uint16_t id)
{
	size_t at = 0x100;
	int guard = 64;

	while (at >= 0x100 && at + 4 <= c->len && guard--) {
		uint32_t h = cfg32(c, at);

		if (h == 0 || h == 0xffffffff)
			return 0;
		if ((h & 0xffff) == id)
			return at;
		at = (h >> 20) & ~3u;
	}
	return 0;
}

/* PCIe device/port type (PCI_EXP_TYPE_*), or -1 without a PCI Express capability. */
static int port_type(const char *bdf)
{
	struct cfg c;
	size_t pcie;

	if (read_cfg(bdf, &c))
		return -1;
	pcie = find_cap(&c, 0x10);
	return pcie ? (cfg16(&c, pcie + 2) >> 4) & 0xf : -1;
}

static const char *port_type_name(int t)
{
	switch (t) {
	case 4:		return "root port";
	case 5:		return "switch upstream port";
	case 6:		return "switch downstream port";
	default:	return "bridge";
	}
}

/* The function bound to driver drv, into bdf[32]; 0 or -1. */
static int bound_to(const char *drv, char *bdf)
{
	char path[PATH_MAX];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/sys/bus/pci/drivers/%s", drv);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		unsigned int a, b, c2, f;

		if (sscanf(e->d_name, "%x:%x:%x.%x", &a, &b, &c2, &f) == 4) {
			snprintf(bdf, 32, "%04x:%02x:%02x.%x", a, b, c2, f); /* sysfs spells it so */
			closedir(d);
			return 0;
		}
	}
	closedir(d);
	return -1;
}

#define MAX_DEPTH 16

/* The bridges above bdf, host bridge side first; returns how many (0..MAX_DEPTH). */
static int ancestors(const char *bdf, char out[][32])
{
	char path[PATH_MAX], real[PATH_MAX], *tok, *save = NULL;
	int n = 0;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", bdf);
	if (!realpath(path, real))
		return 0;
	for (tok = strtok_r(real, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
		unsigned int a, b, c, f;

		if (sscanf(tok, "%x:%x:%x.%x", &a, &b, &c, &f) == 4 && strcmp(tok, bdf) && n < MAX_DEPTH)
			snprintf(out[n++], 32, "%s", tok);
	}
	return n;
}

/* ---- the checks ---- */

struct pair {
	char nic[32], gpu[32];
	char up_nic[MAX_DEPTH][32], up_gpu[MAX_DEPTH][32];
	int n_nic, n_gpu;
	int common;		/* index of the lowest common bridge in up_nic, or -1 */
};

static void check_path(struct pair *p)
{
	const char *fix = "put the NIC and the GPU on downstream ports of one PCIe switch "
			  "(qemu-configs/single-switch.toml); across root ports P2P depends on the "
			  "host bridge and usually falls back to host memory";
	int i, t;

	p->n_nic = ancestors(p->nic, p->up_nic);
	p->n_gpu = ancestors(p->gpu, p->up_gpu);
	p->common = -1;
	for (i = 0; i < p->n_nic && i < p->n_gpu && !strcmp(p->up_nic[i], p->up_gpu[i]); i++)
		p->common = i;
	if (p->common < 0) {
		report("same_switch", FAIL, fix, "NIC %s and GPU %s share no bridge: P2P crosses the host bridge",
		       p->nic, p->gpu);
		return;
	}
	t = port_type(p->up_nic[p->common]);
	report("same_switch", t == 5 || t == 6 ? PASS : WARN, fix,
	       "lowest bridge above NIC %s and GPU %s: %s (%s)", p->nic, p->gpu,
	       p->up_nic[p->common], port_type_name(t));
}

/* ACS control of every port from each device up to the lowest common bridge. */
static void check_acs(const struct pair *p)
{
	char read[320] = "";
	char fix[320] = "";
	enum verdict v = PASS;
	int side, i;

	for (side = 0; side < 2; side++) {
		const char (*up)[32] = side ? p->up_gpu : p->up_nic;
		int n = side ? p->n_gpu : p->n_nic;
		int from = p->common < 0 ? 0 : p->common;

		for (i = n - 1; i >= from; i--) {
			struct cfg c;
			size_t acs;
			uint16_t ctl;

			if (side && i == p->common)
				continue;	/* the common bridge is listed once */
			if (read_cfg(up[i], &c))
				continue;
			acs = find_ext_cap(&c, 0x000d);
			if (!acs)
				continue;
			ctl = cfg16(&c, acs + 6);
			snprintf(read + strlen(read), sizeof(read) - strlen(read), "%s%s=0x%04x",
				 *read ? " " : "", up[i], ctl);
			if (ctl & (1 << 2 | 1 << 3 | 1 << 5)) {
				v = FAIL;
				snprintf(fix, sizeof(fix),
					 "clear Request/Completion Redirect and P2P Egress Control: "
					 "setpci -s %s ECAP_ACS+6.w=0x0000 (or disable ACS in firmware; "
					 "an IOMMU in DMA mode sets it again)", up[i]);
			}
		}
	}
	report("acs", v, fix, "ACS control (RR bit 2, CR bit 3, EC bit 5): %s",
	       *read ? read : "no port between them has ACS");
}

static void check_iommu(const char *nic)
{
	char group[PATH_MAX], path[PATH_MAX], type[64] = "", cmdline[1024] = "";
	ssize_t n;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group", nic);
	n = readlink(path, group, sizeof(group) - 1);
	read_file("/proc/cmdline", cmdline, sizeof(cmdline));
	if (n <= 0) {
		report("iommu", PASS, "", "no IOMMU translates the NIC's DMA (cmdline: %s)", cmdline);
		return;
	}
	group[n] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group/type", nic);
	read_file(path, type, sizeof(type));
	if (!strcmp(type, "identity")) {
		report("iommu", PASS, "", "IOMMU group %s in passthrough (identity) mode", strrchr(group, '/') + 1);
		return;
	}
	report("iommu", FAIL,
	       "boot with iommu=pt (passthrough for devices) or without the IOMMU: in DMA mode "
	       "Linux sets ACS redirect and peer-to-peer DMA goes through the root complex or "
	       "falls back to host memory",
	       "IOMMU group %s type %s (cmdline: %s)", strrchr(group, '/') + 1, *type ? type : "unknown",
	       cmdline);
}

static void check_p2pdma(const char *gpu)
{
	char published[16] = "", size[32] = "";

	read_dev_attr(gpu, "p2pmem/published", published, sizeof(published));
	read_dev_attr(gpu, "p2pmem/size", size, sizeof(size));
	report("p2pdma", !strcmp(published, "1") ? PASS : FAIL,
	       "load rnic_emu_gpu (it registers and publishes BAR1 with pci_p2pdma_add_resource "
	       "and pci_p2pmem_publish)",
	       "GPU %s p2pmem published=%s size=%s", gpu, *published ? published : "absent",
	       *size ? size : "absent");
}

/* The kernel's P2PDMA verdict: a strict-P2P REG_MR over 4 KiB of GPU memory. */
static void check_distance(void)
{
	const char *fix = "Linux refused peer-to-peer DMA between the NIC and the GPU: see same_switch, "
			  "acs and iommu";
	struct rnic_query_device q;
	struct rnic_alloc_pd pd = { 0 };
	struct rnic_reg_mr r = { 0 };
	struct rnic_reg_mr d = { 0 };
	struct rv_gpu g;
	void *buf;
	int fd;

	fd = rv_open(RV_DEFAULT_DEV, &q);
	if (fd < 0) {
		report("p2p_distance", FAIL, "load rnic_emu", "cannot open %s", RV_DEFAULT_DEV);
		return;
	}
	if (rv_gpu_open(0, &g)) {
		report("p2p_distance", FAIL, "load rnic_emu_gpu", "cannot open /dev/rnic_gpu0");
		close(fd);
		return;
	}
	buf = rv_gpu_alloc(&g, 4096);
	if (!buf || rv_ioctl(fd, RNIC_IOCTL_ALLOC_PD, &pd, "ALLOC_PD")) {
		report("p2p_distance", FAIL, "publish the GPU's BAR1 (p2pdma)", "no GPU memory to register");
		goto out;
	}
	r.addr = (uintptr_t)buf;
	r.length = 4096;
	r.access = RNIC_UACCESS_LOCAL_WRITE;
	r.pd = pd.pd;
	r.flags = RNIC_MR_FLAG_STRICT_P2P;
	if (ioctl(fd, RNIC_IOCTL_REG_MR, &r)) {
		report("p2p_distance", FAIL, fix, "strict-P2P MR over GPU memory refused: %s", strerror(errno));
		goto out;
	}
	report("p2p_distance", r.path == RNIC_MR_PATH_P2P_SWITCH ? PASS : WARN,
	       "peer-to-peer through the host bridge works but crosses the root complex; "
	       "a shared switch is shorter",
	       "kernel P2PDMA verdict: %s", rv_mr_path_name(r.path));
	d.index = r.index;
	rv_ioctl(fd, RNIC_IOCTL_DEREG_MR, &d, "DEREG_MR");
	rv_ioctl(fd, RNIC_IOCTL_DEALLOC_PD, &pd, "DEALLOC_PD");
out:
	if (buf)
		munmap(buf, 4096);
	close(g.fd);
	close(fd);
}

static void check_aperture(const char *nic, const char *gpu)
{
	char ap[512] = "", bus[32] = "";
	unsigned long long want;
	char *line, *save = NULL;
	bool found = false;

	read_dev_attr(nic, "bar1_aperture", ap, sizeof(ap));
	read_dev_attr(gpu, "mem_bus_addr", bus, sizeof(bus));
	want = strtoull(bus, NULL, 16);
	for (line = strtok_r(ap, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		unsigned int slot;
		unsigned long long a;

		if (sscanf(line, "slot%u %llx", &slot, &a) == 2 && a == want && want)
			found = true;
	}
	report("aperture", found ? PASS : FAIL,
	       "bind rnic_emu after rnic_emu_gpu, or write the slot: echo \"0 ADDR\" > "
	       "/sys/bus/pci/devices/NIC/bar1_aperture",
	       "GPU BAR1 at %s %s a BAR1_APERTURE slot", *bus ? bus : "(unknown)",
	       found ? "is in" : "is not in");
}

static void check_mps_mrrs(const char *nic)
{
	struct cfg c;
	size_t pcie;
	unsigned int mps, mrrs, cap;

	if (read_cfg(nic, &c) || !(pcie = find_cap(&c, 0x10))) {
		report("mps_mrrs", FAIL, "run as root", "cannot read the NIC's PCI Express capability");
		return;
	}
	cap = 128u << (cfg32(&c, pcie + 4) & 7);
	mps = 128u << ((cfg16(&c, pcie + 8) >> 5) & 7);
	mrrs = 128u << ((cfg16(&c, pcie + 8) >> 12) & 7);
	report("mps_mrrs", mrrs >= 512 ? PASS : WARN,
	       "raise MRRS to 512 bytes: setpci -s NIC CAP_EXP+8.w=0x2000:0x7000",
	       "MPS %u bytes (device supports %u), MRRS %u bytes", mps, cap, mrrs);
}

static void check_bar1(const char *gpu)
{
	char res[4096] = "", mem[32] = "";
	unsigned long long start = 0, end = 0, flags, memsize;
	char *line;

	read_dev_attr(gpu, "resource", res, sizeof(res));
	read_dev_attr(gpu, "mem_size", mem, sizeof(mem));
	line = strchr(res, '\n');	/* second line: BAR1 */
	if (line)
		sscanf(line + 1, "%llx %llx %llx", &start, &end, &flags);
	memsize = strtoull(mem, NULL, 0);
	if (!start || end <= start) {
		report("bar1_size", FAIL, "enable the GPU's BAR1 (firmware must assign it)",
		       "GPU BAR1 unassigned");
		return;
	}
	report("bar1_size", end - start + 1 >= memsize ? PASS : WARN,
	       "enlarge BAR1 in firmware (bar1_mib in the topology) so it covers GPU memory",
	       "GPU BAR1 %llu MiB for %llu MiB of GPU memory", (end - start + 1) >> 20, memsize >> 20);
}

static void check_link(const char *nic)
{
	static const char *const gts[] = { "?", "2.5", "5", "8", "16", "32", "64" };
	struct cfg c;
	size_t pcie;
	unsigned int cs, cw, ss, sw;

	if (read_cfg(nic, &c) || !(pcie = find_cap(&c, 0x10))) {
		report("link", FAIL, "run as root", "cannot read the NIC's PCI Express capability");
		return;
	}
	cs = cfg32(&c, pcie + 0x0c) & 0xf;
	cw = (cfg32(&c, pcie + 0x0c) >> 4) & 0x3f;
	ss = cfg16(&c, pcie + 0x12) & 0xf;
	sw = (cfg16(&c, pcie + 0x12) >> 4) & 0x3f;
	report("link", ss == cs && sw == cw ? PASS : WARN,
	       "the link trained below its capability: check the slot, riser and BIOS link settings",
	       "NIC link %s GT/s x%u (capable %s GT/s x%u)", gts[ss < 7 ? ss : 0], sw, gts[cs < 7 ? cs : 0], cw);
}

static void check_kernel(void)
{
	struct utsname u;
	unsigned int major = 0, minor = 0;

	uname(&u);
	sscanf(u.release, "%u.%u", &major, &minor);
	report("kernel", major > 5 || (major == 5 && minor >= 12) ? PASS : FAIL,
	       "use Linux 5.12 or later (dma-buf memory regions)", "Linux %s", u.release);
}

static void check_fallbacks(const char *nic)
{
	char path[PATH_MAX];
	unsigned long long fb = 0, pages = 0;

	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_stats", nic);
	if (rv_read_stat(path, "p2p_fallbacks", &fb) || rv_read_stat(path, "mr_bounce_pages", &pages)) {
		report("p2p_fallbacks", FAIL, "load rnic_emu", "cannot read %s", path);
		return;
	}
	report("p2p_fallbacks", fb ? WARN : PASS,
	       "GPU memory was silently bounced through host memory: fix the items above, "
	       "or register with the strict-P2P flag to fail instead",
	       "p2p_fallbacks %llu, mr_bounce_pages %llu", fb, pages);
}

static void check_aer(const char *nic)
{
	static const char *const files[] = { "aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal" };
	char read[320] = "", buf[2048];
	enum verdict v = PASS;
	struct cfg c;
	unsigned int i;

	if (read_cfg(nic, &c) || !find_ext_cap(&c, 0x0001)) {
		report("aer", WARN, "a NIC without AER hides link errors", "no AER capability on the NIC");
		return;
	}
	for (i = 0; i < 3; i++) {
		unsigned long long total = 0;
		char *t;

		if (read_dev_attr(nic, files[i], buf, sizeof(buf)))
			continue;
		t = strstr(buf, "TOTAL_ERR_");
		if (t)
			sscanf(strchr(t, ' ') ? strchr(t, ' ') : t, "%llu", &total);
		if (total)
			v = WARN;
		snprintf(read + strlen(read), sizeof(read) - strlen(read), " %s=%llu", files[i] + 8, total);
	}
	report("aer", v, "errors were reported: see dmesg and the link (ports, cabling)",
	       "AER capability present;%s", *read ? read : " no aer_dev_* counters (kernel without AER)");
}

/* ---- output ---- */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void usage(void)
{
	fprintf(stderr, "usage: rnic-doctor [--json] [--nic BDF] [--gpu BDF]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "nic", required_argument, NULL, 'n' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct pair p = { 0 };
	bool json = false, failed = false;
	unsigned int i;
	int c;

	while ((c = getopt_long(argc, argv, "jn:g:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': json = true; break;
		case 'n': snprintf(p.nic, sizeof(p.nic), "%s", optarg); break;
		case 'g': snprintf(p.gpu, sizeof(p.gpu), "%s", optarg); break;
		case 'h': usage(); return 0;
		default: usage(); return 2;
		}
	}
	if (!*p.nic && bound_to("rnic_emu", p.nic)) {
		fprintf(stderr, "rnic-doctor: no PCI function bound to rnic_emu (modprobe rnic_emu)\n");
		return 2;
	}
	if (!*p.gpu && bound_to("rnic_emu_gpu", p.gpu)) {
		fprintf(stderr, "rnic-doctor: no PCI function bound to rnic_emu_gpu\n");
		return 2;
	}
	/* The fallback counter first: the distance probe is strict and bounces nothing. */
	check_fallbacks(p.nic);
	check_path(&p);
	check_acs(&p);
	check_iommu(p.nic);
	check_p2pdma(p.gpu);
	check_distance();
	check_aperture(p.nic, p.gpu);
	check_mps_mrrs(p.nic);
	check_bar1(p.gpu);
	check_link(p.nic);
	check_kernel();
	check_aer(p.nic);

	if (json)
		printf("[");
	for (i = 0; i < n_items; i++) {
		const struct item *it = &items[i];

		failed |= it->v == FAIL;
		if (!json) {
			printf("%-4s %-13s %s\n", verdict_name[it->v], it->name, it->read);
			if (*it->fix)
				printf("     %-13s fix: %s\n", "", it->fix);
			continue;
		}
		printf("%s{\"item\":", i ? "," : "");
		json_str(it->name);
		printf(",\"verdict\":\"%s\",\"read\":", verdict_name[it->v]);
		json_str(it->read);
		printf(",\"fix\":");
		json_str(it->fix);
		printf("}");
	}
	if (json)
		printf("]\n");
	return failed ? 1 : 0;
}
