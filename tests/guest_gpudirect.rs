//! Guest-level GPUDirect tests: one boot per topology. The guest moves data between host
//! memory and GPU memory with `rnic-perf` (every byte verified by the guest), and each
//! result is checked against what the device counted per PCIe path, and against the Linux
//! P2PDMA decision the guest's driver reported: P2P through the switch, through the host
//! bridge, or a host bounce buffer after Linux refused (Intel host bridge, ACS redirect).

mod common;
use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

fn results(out: &str) -> Vec<Value> {
    out.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("JSON line")).collect()
}

/// The result of `test` with `src` -> `dst` at `size` (the first one, or the `nth`).
fn find<'a>(rs: &'a [Value], test: &str, src: &str, dst: &str, size: u64, nth: usize) -> &'a Value {
    rs.iter()
        .filter(|r| r["test"] == test && r["src"] == src && r["dst"] == dst && r["size"] == size)
        .nth(nth)
        .unwrap_or_else(|| panic!("no {test} {src}->{dst} {size} result #{nth}"))
}

/// Checks the bytes the device counted per path for a test that moved `n` bytes.
fn paths(r: &Value, host: u64, switch: u64, root_complex: u64) {
    assert_eq!(
        (r["bytes_host"].as_u64(), r["bytes_p2p_switch"].as_u64(), r["bytes_p2p_root_complex"].as_u64()),
        (Some(host), Some(switch), Some(root_complex)),
        "bytes per path in {r}"
    );
}

fn verified(r: &Value, size: u64, iters: u64) {
    assert_eq!(r["bytes_verified"].as_u64(), Some(size * iters), "every byte checked in the guest: {r}");
}

#[test]
fn single_switch_p2p_through_the_switch_and_the_gpu_engine() {
    let stats = tempfile::NamedTempFile::new().unwrap();
    let sizes = [4096u64, MIB, 64 * MIB];
    let mut script = String::new();
    for s in sizes {
        let n = if s == 64 * MIB { 2 } else { 4 };
        for (src, dst) in [("host", "gpu"), ("gpu", "host"), ("gpu", "gpu")] {
            script += &format!("rnic-perf write -s {s} -n {n} --src {src} --dst {dst} --verify --json || echo failed\n");
        }
        script += &format!("rnic-perf read -s {s} -n {n} --src host --dst gpu --verify --json || echo failed\n");
    }
    script += "for op in fill copy reduce; do rnic-gpu $op -s 16M || echo failed; done\n";
    script += "rnic-gpu errors\nrnic-verbs-check aperture\n";
    let run = run_guest(&topology("single-switch"), &["--stats", stats.path().to_str().unwrap()], &script);
    assert_eq!(run.code, Some(0));
    assert!(!run.stdout.contains("failed"), "a guest command failed");
    let rs = results(&run.stdout);
    let mut moved_p2p = 0;
    for s in sizes {
        let n = if s == 64 * MIB { 2 } else { 4 };
        let b = s * n;
        let r = find(&rs, "write", "host", "gpu", s, 0);
        verified(r, s, n);
        assert_eq!((r["dst_path"].as_str(), r["p2p_fallback"].as_bool()), (Some("p2p-switch"), Some(false)));
        paths(r, b, b, 0);
        let r = find(&rs, "write", "gpu", "host", s, 0);
        verified(r, s, n);
        paths(r, b, b, 0);
        let r = find(&rs, "write", "gpu", "gpu", s, 0);
        verified(r, s, n);
        paths(r, 0, 2 * b, 0); // GPU to GPU: not one byte through host memory
        let r = find(&rs, "read", "host", "gpu", s, 0);
        verified(r, s, n);
        paths(r, b, b, 0);
        moved_p2p += 5 * b;
    }
    // The GPU engine's results, checked by the guest CPU.
    for op in ["fill", "copy", "reduce"] {
        let block = run.stdout.split(&format!("op: {op}")).nth(1).unwrap_or_else(|| panic!("no rnic-gpu {op} output"));
        assert!(block.lines().take(6).any(|l| l.trim() == "verified: 1"), "rnic-gpu {op} verified");
    }
    // Hostile engine launches are refused with the device's reason; the engine still works.
    let out = &run.stdout;
    assert_eq!((value(out, "range_result"), value(out, "align_result"), value(out, "bad_op_result")), ("RANGE", "ALIGN", "BAD_OP"));
    assert_eq!(value(out, "after_verified"), "1");
    // A GPU BAR1 the driver removed from the aperture slots is unreachable: error CQE,
    // GPU memory untouched; P2P works again once the slot is restored.
    let ap = out.split("scenario: aperture").nth(1).expect("aperture scenario output");
    assert_eq!((value(ap, "before_status"), value(ap, "status"), value(ap, "syndrome")), ("SUCCESS", "FATAL_ERR", "APERTURE"));
    assert_eq!((value(ap, "gpu_untouched"), value(ap, "restored")), ("1", "1"));
    // The host side saw the same P2P bytes (server counters after the run).
    let js: Value = serde_json::from_str(&std::fs::read_to_string(stats.path()).unwrap()).unwrap();
    // (+ the aperture scenario's one successful 4 KiB GPU write before the slot was cleared)
    let aperture_ok = 4096;
    assert_eq!(js["node0-rnic0"]["dma_p2p_switch_bytes"].as_u64(), Some(moved_p2p + aperture_ok));
    assert_eq!(js["node0-rnic0"]["dma_p2p_root_complex_bytes"].as_u64(), Some(0));
    assert!(js["node0-gpu0"]["engine_ops"].as_u64() >= Some(3));
}

#[test]
fn separate_root_ports_intel_refuses_p2p_and_falls_back() {
    let script = "rnic-perf write -s 1M -n 4 --src gpu --dst gpu --verify --json || echo failed
                  rnic-perf write -s 1M -n 4 --src host --dst gpu --strict-p2p --json; echo strict_rc: $?
                  echo fallback_warnings: $(dmesg | grep -c 'cannot DMA to GPU .* peer-to-peer (-121): using a host bounce buffer')
                  rnic-dmabuf-check refused -s 64K; echo dmabuf_rc: $?";
    let run = run_guest(&topology("separate-root-ports"), &[], script);
    assert_eq!(run.code, Some(0));
    assert!(!run.stdout.contains("failed"));
    let rs = results(&run.stdout);
    let r = find(&rs, "write", "gpu", "gpu", MIB, 0);
    verified(r, MIB, 4);
    assert_eq!((r["src_path"].as_str(), r["dst_path"].as_str(), r["p2p_fallback"].as_bool()), (Some("bounce"), Some("bounce"), Some(true)));
    paths(r, 2 * 4 * MIB, 0, 0); // everything through host memory
    assert_ne!(value(&run.stdout, "strict_rc"), "0", "strict P2P registration must fail");
    assert!(run.stdout.contains("Remote I/O error"), "strict mode reports -EREMOTEIO");
    assert!(value(&run.stdout, "fallback_warnings").parse::<u32>().unwrap() >= 2, "the driver warned, naming both devices");
    // The same GPU memory as a dma-buf (ibv_reg_dmabuf_mr on rnic0): the exporter maps it
    // for the RNIC with the same P2PDMA rules, so registration is refused with -EREMOTEIO
    // (a dma-buf MR never bounces), counted as a failed registration, not as a fallback.
    assert_eq!(value(&run.stdout, "dmabuf_rc"), "0", "rnic-dmabuf-check refused");
    assert_eq!(value(&run.stdout, "dmabuf-refused"), "errno 121 (Remote I/O error)");
    assert_eq!(value(&run.stdout, "dmabuf-p2p_fallbacks"), "0");
    assert_eq!(value(&run.stdout, "dmabuf-mr_reg_failures"), "1");
}

#[test]
fn separate_root_ports_amd_allows_p2p_through_the_host_bridge() {
    let run = run_guest(&topology("separate-root-ports-amd"), &[], "rnic-perf write -s 1M -n 4 --src gpu --dst gpu --verify --json");
    assert_eq!(run.code, Some(0));
    let rs = results(&run.stdout);
    let r = find(&rs, "write", "gpu", "gpu", MIB, 0);
    verified(r, MIB, 4);
    assert_eq!((r["dst_path"].as_str(), r["p2p_fallback"].as_bool()), (Some("p2p-host-bridge"), Some(false)));
    paths(r, 0, 0, 2 * 4 * MIB); // root-complex traffic, no host memory
}

/// Linux caches the P2PDMA decision per provider and client, so after turning ACS Request
/// Redirect on, the GPU driver is rebound (a fresh provider) before asking again.
#[test]
fn multifunction_p2p_until_acs_redirect_is_set() {
    let script = "rnic-perf write -s 1M -n 2 --src gpu --dst gpu --verify --json || echo failed
                  setpci -s 00:03.0 ECAP_ACS+6.w=0x0004
                  echo acs_ctl: $(setpci -s 00:03.0 ECAP_ACS+6.w)
                  g=$(rnic-bar find gpu)
                  echo $g > /sys/bus/pci/drivers/rnic_emu_gpu/unbind
                  echo $g > /sys/bus/pci/drivers/rnic_emu_gpu/bind
                  rnic-perf write -s 1M -n 2 --src gpu --dst gpu --verify --json || echo failed
                  rnic-perf write -s 1M -n 2 --src gpu --dst gpu --strict-p2p --json; echo strict_rc: $?
                  echo acs_reason: $(dmesg | grep -c 'ACS redirect is set between the client and provider')";
    let run = run_guest(&topology("multifunction"), &[], script);
    assert_eq!(run.code, Some(0));
    assert!(!run.stdout.contains("failed"));
    let rs = results(&run.stdout);
    let before = find(&rs, "write", "gpu", "gpu", MIB, 0);
    verified(before, MIB, 2);
    assert_eq!(before["p2p_fallback"].as_bool(), Some(false));
    paths(before, 0, 0, 2 * 2 * MIB);
    assert_eq!(value(&run.stdout, "acs_ctl"), "0004");
    let after = find(&rs, "write", "gpu", "gpu", MIB, 1);
    verified(after, MIB, 2);
    assert_eq!((after["dst_path"].as_str(), after["p2p_fallback"].as_bool()), (Some("bounce"), Some(true)));
    paths(after, 2 * 2 * MIB, 0, 0);
    assert_ne!(value(&run.stdout, "strict_rc"), "0");
    assert!(value(&run.stdout, "acs_reason").parse::<u32>().unwrap() >= 1, "the kernel's own ACS reason is in dmesg");
}

#[test]
fn two_gpus_gpu_to_gpu_through_the_switch() {
    let script = "rnic-perf write -s 4M -n 4 --src gpu --src-gpu 0 --dst gpu --dst-gpu 1 --verify --json
                  rnic-perf read -s 4M -n 4 --src gpu --src-gpu 1 --dst gpu --dst-gpu 0 --verify --json";
    let run = run_guest(&topology("switch-two-gpus"), &[], script);
    assert_eq!(run.code, Some(0));
    let rs = results(&run.stdout);
    for test in ["write", "read"] {
        let r = find(&rs, test, "gpu", "gpu", 4 * MIB, 0);
        verified(r, 4 * MIB, 4);
        paths(r, 0, 2 * 4 * 4 * MIB, 0);
    }
}

/// With an IOMMU Linux turns ACS redirect on in the root port itself: P2P is refused from
/// the start and the data bounces through host memory, whose DMA addresses are now IOVAs
/// that QEMU maps page by page.
#[test]
fn multifunction_with_an_iommu_falls_back() {
    let script = "rnic-perf write -s 1M -n 2 --src gpu --dst gpu --verify --json || echo failed
                  rnic-perf send -s 64K -n 20 --verify --json || echo failed
                  echo acs_reason: $(dmesg | grep -c 'ACS redirect is set between the client and provider')
                  echo iommu: $(dmesg | grep -c 'DMAR: IOMMU enabled')";
    let run = run_guest(&topology("multifunction-iommu"), &[], script);
    assert_eq!(run.code, Some(0));
    assert!(!run.stdout.contains("failed"));
    assert_eq!(value(&run.stdout, "iommu"), "1");
    assert!(value(&run.stdout, "acs_reason").parse::<u32>().unwrap() >= 1);
    let rs = results(&run.stdout);
    let r = find(&rs, "write", "gpu", "gpu", MIB, 0);
    verified(r, MIB, 2);
    assert_eq!(r["p2p_fallback"].as_bool(), Some(true));
    paths(r, 2 * 2 * MIB, 0, 0);
    verified(find(&rs, "send", "host", "host", 64 << 10, 0), 64 << 10, 20);
}
