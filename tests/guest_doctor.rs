//! Guest-level test of `rnic-doctor`, one boot per topology: the checklist's items by
//! name, each verdict, what it read, the fix it gives, and the exit status.
//! - single-switch: every item passes, exit 0;
//! - separate-root-ports: the path fails (no shared bridge) with the fix, and the kernel
//!   refuses P2P; exit 1;
//! - multifunction: passes with warnings (root port, P2P through the host bridge), then
//!   fails on ACS once Request Redirect is set with setpci (and the GPU rebound so Linux
//!   decides again); exit 1;
//! - multifunction-iommu: the IOMMU item fails (DMA translation, ACS set by Linux).

mod common;
use common::*;
use serde_json::Value;

const ITEMS: [&str; 12] =
    ["p2p_fallbacks", "same_switch", "acs", "iommu", "p2pdma", "p2p_distance", "aperture", "mps_mrrs", "bar1_size", "link", "kernel", "aer"];

/// The doctor's JSON reports in the guest's output, in order.
fn reports(out: &str) -> Vec<Vec<Value>> {
    let rs: Vec<Vec<Value>> = out.lines().filter(|l| l.starts_with('[')).map(|l| serde_json::from_str(l).expect("JSON report")).collect();
    for r in &rs {
        let names: Vec<&str> = r.iter().map(|i| i["item"].as_str().unwrap()).collect();
        assert_eq!(names, ITEMS, "every checklist item, in order");
        for i in r {
            assert!(["PASS", "WARN", "FAIL"].contains(&i["verdict"].as_str().unwrap()), "{i}");
            assert!(!i["read"].as_str().unwrap().is_empty(), "each item says what it read: {i}");
            assert_eq!(i["verdict"] == "PASS", i["fix"] == "", "a fix exactly when not passing: {i}");
        }
    }
    rs
}

fn item<'a>(r: &'a [Value], name: &str) -> &'a Value {
    r.iter().find(|i| i["item"] == name).unwrap()
}

fn verdict<'a>(r: &'a [Value], name: &str) -> &'a str {
    item(r, name)["verdict"].as_str().unwrap()
}

#[test]
fn single_switch_passes_every_item() {
    let run = run_guest(&topology("single-switch"), &[], "rnic-doctor --json; echo rc: $?; rnic-doctor");
    let rs = reports(&run.stdout);
    assert_eq!(rs.len(), 1, "{}", run.stdout);
    let r = &rs[0];
    for i in r {
        assert_eq!(i["verdict"], "PASS", "{i}");
    }
    assert_eq!(value(&run.stdout, "rc"), "0");
    assert!(item(r, "same_switch")["read"].as_str().unwrap().contains("switch upstream port"));
    assert!(item(r, "p2p_distance")["read"].as_str().unwrap().contains("p2p-switch"));
    assert!(item(r, "link")["read"].as_str().unwrap().contains("32 GT/s x16 (capable 32 GT/s x16)"), "Gen5 x16 from the topology");
    assert!(item(r, "aer")["read"].as_str().unwrap().contains("AER capability present"));
    assert!(run.stdout.contains("PASS same_switch"), "the human form too");
}

#[test]
fn separate_root_ports_fail_on_the_path_with_the_fix() {
    let run = run_guest(&topology("separate-root-ports"), &[], "rnic-doctor --json; echo rc: $?; rnic-doctor");
    let r = &reports(&run.stdout)[0];
    assert_eq!(value(&run.stdout, "rc"), "1");
    let path = item(r, "same_switch");
    assert_eq!(path["verdict"], "FAIL");
    assert!(path["read"].as_str().unwrap().contains("share no bridge"), "{path}");
    assert!(path["fix"].as_str().unwrap().contains("downstream ports of one PCIe switch"), "{path}");
    assert_eq!(verdict(r, "p2p_distance"), "FAIL", "Linux refuses P2P across this host bridge");
    assert_eq!((verdict(r, "iommu"), verdict(r, "aperture"), verdict(r, "p2pdma")), ("PASS", "PASS", "PASS"));
    assert!(run.stdout.contains("fix: put the NIC and the GPU"), "the human form prints the fix");
}

#[test]
fn multifunction_fails_on_acs_once_redirect_is_set() {
    let script = "rnic-doctor --json; echo rc: $?
                  setpci -s 00:03.0 ECAP_ACS+6.w=0x0004
                  g=$(rnic-bar find gpu)
                  echo $g > /sys/bus/pci/drivers/rnic_emu_gpu/unbind
                  echo $g > /sys/bus/pci/drivers/rnic_emu_gpu/bind
                  rnic-doctor --json; echo rc: $?";
    let run = run_guest(&topology("multifunction"), &[], script);
    let rs = reports(&run.stdout);
    assert_eq!(rs.len(), 2, "{}", run.stdout);
    assert_eq!(values(&run.stdout, "rc"), ["0", "1"]);
    let (before, after) = (&rs[0], &rs[1]);
    assert_eq!(verdict(before, "same_switch"), "WARN", "one slot below a root port");
    assert_eq!((verdict(before, "acs"), verdict(before, "p2p_distance")), ("PASS", "WARN"));
    let acs = item(after, "acs");
    assert_eq!(acs["verdict"], "FAIL");
    assert!(acs["read"].as_str().unwrap().contains("0000:00:03.0=0x0004"), "{acs}");
    assert!(acs["fix"].as_str().unwrap().contains("setpci -s 0000:00:03.0 ECAP_ACS+6.w=0x0000"), "{acs}");
    assert_eq!(verdict(after, "p2p_distance"), "FAIL", "Linux now refuses P2P");
}

#[test]
fn multifunction_iommu_fails_on_the_iommu() {
    let run = run_guest(&topology("multifunction-iommu"), &[], "rnic-doctor --json; echo rc: $?");
    let r = &reports(&run.stdout)[0];
    assert_eq!(value(&run.stdout, "rc"), "1");
    let iommu = item(r, "iommu");
    assert_eq!(iommu["verdict"], "FAIL", "{iommu}");
    assert!(iommu["read"].as_str().unwrap().contains("type DMA"), "{iommu}");
    assert!(iommu["fix"].as_str().unwrap().contains("iommu=pt"), "{iommu}");
    assert_eq!(verdict(r, "acs"), "FAIL", "Linux set ACS redirect itself");
}
