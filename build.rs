//! Puts the GPU kernels' PTX at `$OUT_DIR/kernels.ptx` for
//! `include_str!(concat!(env!("OUT_DIR"), "/kernels.ptx"))`: compiled from `kernels-ptx/` by
//! `scripts/build-ptx` when the toolchain has the `rust-src` component (needed to build `core`
//! for nvptx64), else the committed `kernels-ptx/kernels.ptx`, which `scripts/check-ptx`
//! keeps identical to a fresh build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let script = root.join("scripts/build-ptx");
    let committed = root.join("kernels-ptx/kernels.ptx");
    for input in [
        "kernels-ptx/src",
        "kernels-ptx/Cargo.toml",
        "kernels-ptx/kernels.ptx",
        "scripts/build-ptx",
    ] {
        println!("cargo:rerun-if-changed={input}");
    }
    let out = out_dir.join("kernels.ptx");
    if has_rust_src() && script.exists() {
        // The outer cargo holds the lock on its own build directory: the nested build gets
        // one of its own beside it. The script clears the flags and wrappers the outer cargo
        // passes down, so the PTX is the committed one byte for byte.
        let target_dir = target_dir(&out_dir).join("nvptx");
        let status = Command::new("bash")
            .arg(&script)
            .arg(&out)
            .arg(&target_dir)
            .status();
        if matches!(status, Ok(s) if s.success()) {
            return;
        }
        // A toolchain that cannot build for nvptx (say, no network for core's dependencies)
        // still builds the library; scripts/check-ptx is where a stale PTX fails.
        println!(
            "cargo:warning=scripts/build-ptx failed ({status:?}); using the committed kernels-ptx/kernels.ptx"
        );
    }
    std::fs::copy(&committed, &out).expect("copy kernels-ptx/kernels.ptx");
}

/// Whether the active toolchain can build `core` from source (`-Zbuild-std`).
fn has_rust_src() -> bool {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&output.stdout);
    output.status.success()
        && Path::new(sysroot.trim())
            .join("lib/rustlib/src/rust/library/Cargo.lock")
            .exists()
}

/// The outer build's target directory (cargo marks it with `CACHEDIR.TAG`); `OUT_DIR` itself
/// if none is found.
fn target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").exists())
        .unwrap_or(out_dir)
        .to_path_buf()
}
