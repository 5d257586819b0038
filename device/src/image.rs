//! Locates (and, when asked, builds) the guest image that `images/build.sh` produces:
//! kernel, initramfs with our driver and tools, and the QEMU wrapper of the toolchain root
//! (`RNIC_EMU_QEMU` names another QEMU binary).

use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Image {
    pub dir: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub qemu: PathBuf,
}

/// The repository this binary was built from (`RNIC_EMU_REPO` overrides it).
pub fn repo_root() -> PathBuf {
    std::env::var_os("RNIC_EMU_REPO").map(PathBuf::from).unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

/// The image directory (`RNIC_EMU_IMAGE_DIR` overrides it, as for images/build.sh).
pub fn image_dir() -> PathBuf {
    std::env::var_os("RNIC_EMU_IMAGE_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("build/image"))
}

/// The QEMU binary a run starts: `RNIC_EMU_QEMU` when set, else the image's wrapper.
pub fn qemu_path(image_dir: &Path) -> PathBuf {
    std::env::var_os("RNIC_EMU_QEMU").map(PathBuf::from).unwrap_or_else(|| image_dir.join("bin/qemu-system-x86_64"))
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Checks that `RNIC_EMU_QEMU`, when set, names an executable file (before anything is
/// built: the image build does not provide it).
pub fn check_qemu_override() -> anyhow::Result<()> {
    match std::env::var_os("RNIC_EMU_QEMU").map(PathBuf::from) {
        Some(q) if !executable(&q) => bail!("QEMU {} (RNIC_EMU_QEMU) is not an executable file", q.display()),
        _ => Ok(()),
    }
}

/// Runs `images/build.sh` (cached: seconds when nothing changed), progress on stderr.
pub fn build() -> anyhow::Result<()> {
    let script = repo_root().join("images/build.sh");
    let status = Command::new("bash").arg(&script).env("RNIC_EMU_IMAGE_DIR", image_dir()).status().with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

/// The image, built first when `build` is set; an error says how to build it otherwise.
pub fn ensure(build_first: bool) -> anyhow::Result<Image> {
    if build_first {
        build()?;
    }
    let dir = image_dir();
    let img = Image { kernel: dir.join("vmlinuz"), initramfs: dir.join("initramfs.cpio.gz"), qemu: qemu_path(&dir), dir };
    check_qemu_override()?;
    if !img.qemu.exists() {
        bail!("QEMU {} is missing: run images/build.sh (or drop --no-build), or set RNIC_EMU_QEMU", img.qemu.display());
    }
    for f in [&img.kernel, &img.initramfs] {
        if !f.exists() {
            bail!("{} is missing: run images/build.sh (or drop --no-build)", f.display());
        }
    }
    Ok(img)
}
