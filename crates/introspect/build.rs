//! Records the compiler's version for `awscni_build_info{goversion}`, the label where the Go
//! CNI puts `runtime.Version()` ("go1.22.5"): ours reads "rust1.95.0".

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.split_whitespace().nth(1).map(|v| format!("rust{v}")))
        .unwrap_or_else(|| "rust".to_string());
    println!("cargo:rustc-env=INTROSPECT_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-env-changed=RUSTC");
}
